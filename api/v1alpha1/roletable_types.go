package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Names of the QuantumNodeRoleTable kind and resource.
const (
	// RoleTableKind is the kind of a single QuantumNodeRoleTable.
	RoleTableKind = "QuantumNodeRoleTable"
	// RoleTableListKind is the kind of a list of them.
	RoleTableListKind = "QuantumNodeRoleTableList"
	// RoleTableResource is the plural resource name.
	RoleTableResource = "quantumnoderoletables"
)

// A QuantumNodeRoleTable is the static part of qn-admission's role table
// (roles.yaml), compiled for the API server: the parameters of the
// ValidatingAdmissionPolicy that enforces, inside the API server and
// beside the webhook, which operations each role allows, who may place
// nodes under a role, who may delete them, where a stored node may move,
// the exemptions, and the role conditions that are plain comparisons. The
// policy's CEL reads everything from here, so a change of the role table
// changes this object and never the CEL.
//
// `qnctl vap` writes it (with the policy and its binding); qn-controller
// keeps it in step with the policy directory it follows. Nothing else
// should edit it: it is compiled output, and what it names is exact
// (service accounts are user names, prefixes are split from exact names).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=quantumnoderoletables,singular=quantumnoderoletable,shortName=qnrt,scope=Cluster
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.spec.revision`
// +kubebuilder:printcolumn:name="Default",type=string,JSONPath=`.spec.defaultRole`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type QuantumNodeRoleTable struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the compiled role table.
	// +required
	Spec RoleTableSpec `json:"spec"`
}

// RoleTableSpec is a role table as the API server's CEL reads it. The
// limits below (maxItems, maxLength) bound what the policy's expressions
// may cost; a role table beyond them does not compile (`qnctl vap` says
// which field).
type RoleTableSpec struct {
	// Revision is the policy revision this was compiled from (sha256:… or
	// git:…), as qn-webhook's decision log names it.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Revision string `json:"revision"`
	// Source names the policy directory ("bundled" or a path).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Source string `json:"source,omitempty"`
	// DefaultRole serves QuantumNodes without a qn-role annotation.
	// +required
	// +kubebuilder:validation:MaxLength=253
	DefaultRole string `json:"defaultRole"`
	// RoleNames are the declared roles, sorted, for messages.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	RoleNames []string `json:"roleNames"`
	// Exemptions are never judged.
	// +required
	Exemptions RoleTableExemptions `json:"exemptions"`
	// Roles by name.
	// +required
	// +kubebuilder:validation:MaxProperties=64
	Roles map[string]CompiledRole `json:"roles"`
}

// RoleTableExemptions are the role table's exemptions, each list split
// into exact names and prefixes (an entry ending in * in roles.yaml).
type RoleTableExemptions struct {
	// Users and UserPrefixes match request.userInfo.username.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Users []string `json:"users"`
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	UserPrefixes []string `json:"userPrefixes"`
	// Groups and GroupPrefixes match any of request.userInfo.groups.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Groups []string `json:"groups"`
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	GroupPrefixes []string `json:"groupPrefixes"`
	// Namespaces and NamespacePrefixes match the request's namespace.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces"`
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	NamespacePrefixes []string `json:"namespacePrefixes"`
}

// CompiledRole is one role of the table: its static rules.
type CompiledRole struct {
	// Operations the role may perform.
	// +required
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:Enum=CREATE;UPDATE;DELETE;CONNECT
	Operations []string `json:"operations"`
	// Enforced is false for a role in warn or dryrun mode: the API server
	// then leaves the role's refusals to the webhook, which warns or logs
	// them.
	// +required
	Enforced bool `json:"enforced"`
	// Requesters, when set, are the only ones who may create nodes under
	// the role or move nodes into it; absent admits anyone.
	// +optional
	Requesters *CompiledSubjects `json:"requesters,omitempty"`
	// Delete names who may delete the role's nodes when DELETE is not among
	// its operations.
	// +optional
	Delete *CompiledSubjects `json:"delete,omitempty"`
	// MoveTo lists the roles a stored node of this role may move to.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	MoveTo []string `json:"moveTo"`
	// Conditions are the role's policies that are plain comparisons of a
	// label or an annotation of the QuantumNode, judged on CREATE and
	// UPDATE.
	// +required
	Conditions RoleConditions `json:"conditions"`
}

// CompiledSubjects name requesters: exact user names and prefixes (service
// accounts as their user names, system:serviceaccount:<ns>:<name>), exact
// groups and prefixes.
type CompiledSubjects struct {
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Users []string `json:"users"`
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	UserPrefixes []string `json:"userPrefixes"`
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Groups []string `json:"groups"`
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	GroupPrefixes []string `json:"groupPrefixes"`
	// Description lists them as roles.yaml does, for messages: "groups
	// system:masters; service accounts qn-system:deployer".
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Description string `json:"description"`
}

// RoleConditions are a role's comparisons, by what they read.
type RoleConditions struct {
	// Labels judge metadata.labels of the QuantumNode.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Labels []ValueCondition `json:"labels"`
	// Annotations judge metadata.annotations of the QuantumNode.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Annotations []ValueCondition `json:"annotations"`
}

// ValueCondition requires a label or annotation to be present and to pass
// one comparison: Values (one of these) or Below (a decimal number below
// this one).
// +kubebuilder:validation:XValidation:rule="has(self.values) != has(self.below)",message="set exactly one of values and below"
type ValueCondition struct {
	// Key is the label or annotation.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Key string `json:"key"`
	// Values: the value must be one of these.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	Values []string `json:"values,omitempty"`
	// Below: the value must be a decimal number (digits, optionally a
	// point and more digits) below this one.
	// +optional
	// +kubebuilder:validation:Pattern=`^-?[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:MaxLength=32
	Below string `json:"below,omitempty"`
	// BelowDecimals is the number of digits after the point in Below: a
	// value is compared with Below truncated to as many decimals, which
	// decides exactly whether it is below.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=15
	BelowDecimals int32 `json:"belowDecimals"`
	// Rule names the policy the condition compiles, e.g. the Rego package
	// qn.roles.realtime, and the role parameter it reads, for messages.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Rule string `json:"rule"`
}

// QuantumNodeRoleTableList is a list of QuantumNodeRoleTables.
//
// +kubebuilder:object:root=true
type QuantumNodeRoleTableList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the role tables.
	Items []QuantumNodeRoleTable `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(scheme *runtime.Scheme) error {
		scheme.AddKnownTypes(GroupVersion, &QuantumNodeRoleTable{}, &QuantumNodeRoleTableList{})
		return nil
	})
}
