package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Arch is the CPU architecture of a QuantumNode's hardware.
// +kubebuilder:validation:Enum=arm64;amd64
type Arch string

// The architectures a QuantumNode may declare.
const (
	ArchARM64 Arch = "arm64"
	ArchAMD64 Arch = "amd64"
)

// Phase is the coarse lifecycle state the controller reports in status.
// +kubebuilder:validation:Enum=Pending;Progressing;Ready;Failed
type Phase string

// The phases, in the order the controller moves through them:
// Pending → Progressing → Ready | Failed.
const (
	// PhasePending means accepted, not yet acted on by the controller.
	PhasePending Phase = "Pending"
	// PhaseProgressing means the controller is bringing the node's services up.
	PhaseProgressing Phase = "Progressing"
	// PhaseReady means every condition the controller checks is true.
	PhaseReady Phase = "Ready"
	// PhaseFailed means the controller cannot make progress without a change.
	PhaseFailed Phase = "Failed"
)

// Condition types reported in status.conditions.
const (
	// ConditionReady summarises the others: true when the node is usable.
	ConditionReady = "Ready"
	// ConditionServicesReady is true when every declared service is up.
	ConditionServicesReady = "ServicesReady"
	// ConditionNodeMatched is true when spec.nodeName names an existing Node
	// whose architecture matches spec.hardware.arch.
	ConditionNodeMatched = "NodeMatched"
	// ConditionPolicyCompliant is true when the stored QuantumNode breaks
	// none of today's admission policies, as qn-controller's background
	// audit judged it (the message names every violation and the policy
	// revision); Unknown when no policy set judges it (exempt).
	ConditionPolicyCompliant = "PolicyCompliant"
)

// Hardware describes the machine a QuantumNode runs on.
type Hardware struct {
	// Arch is the CPU architecture: arm64 or amd64. It cannot change: a
	// new architecture is new hardware (delete and recreate the node), and
	// changing it in place would silently retarget the node's workloads.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",messageExpression="'spec.hardware.arch is immutable: this QuantumNode was created as ' + strings.quote(oldSelf) + ' and cannot become ' + strings.quote(self) + '; delete and recreate it for new hardware'"
	Arch Arch `json:"arch"`
}

// Service is one network service a QuantumNode exposes.
type Service struct {
	// Name identifies the service within the QuantumNode; a DNS label
	// (RFC 1123), so it can name a Kubernetes Service port.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Port is the TCP port the service listens on.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// QuantumNodeSpec is the desired state of a QuantumNode.
type QuantumNodeSpec struct {
	// Hardware describes the machine the node runs on.
	// +required
	Hardware Hardware `json:"hardware"`

	// Services lists the services the node exposes, at least one and at
	// most 256 (an edge node runs tens; the cap bounds the work and memory
	// of every request that carries the object, and the cost the API
	// server estimates for the uniqueness rules below, which compare every
	// pair: docs/policies.md has the figures). Names and ports must be
	// unique. The API server checks both itself (x-kubernetes-validations,
	// so the rules hold while the admission webhook is not called), with a
	// message that names the repeated name, or the two services that share
	// a port; the list is atomic, so the apiserver's generic "Duplicate
	// value" for map lists does not pre-empt that message. The messages
	// avoid string(int): the API server cannot bound its size and would
	// estimate the rule over its budget.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +kubebuilder:validation:XValidation:rule="self.all(s, self.exists_one(t, t.name == s.name))",messageExpression="'service name ' + strings.quote(self[self.map(s, self.exists_one(t, t.name == s.name)).indexOf(false)].name) + ' is declared more than once; service names must be unique'"
	// +kubebuilder:validation:XValidation:rule="self.all(s, self.exists_one(t, t.port == s.port))",messageExpression="'services ' + strings.quote(self[self.map(s, self.exists_one(t, t.port == s.port)).indexOf(false)].name) + ' and ' + strings.quote(self[self.map(t, t.port).lastIndexOf(self[self.map(s, self.exists_one(t, t.port == s.port)).indexOf(false)].port)].name) + ' declare the same port; each service needs its own port'"
	Services []Service `json:"services"`

	// NodeName is the Kubernetes Node this QuantumNode runs on. The
	// controller matches it against the cluster's Nodes.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// RevisionHistoryLimit is how many old spec revisions (ControllerRevisions)
	// qn-controller keeps for rollback; default 10. The current revision and
	// the last Ready one are always kept.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
	// ProgressDeadlineSeconds is how long a spec change may take to become
	// Ready before it is reported as ProgressDeadlineExceeded (and rolled
	// back, when a health policy asks for it); default 600.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
}

// QuantumNodeStatus is the observed state of a QuantumNode, written by the
// controller through the status subresource only.
type QuantumNodeStatus struct {
	// Phase is a one-word summary of the conditions.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Conditions holds the latest observations, one per type (Ready,
	// ServicesReady, NodeMatched).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Health is the node's health under the QuantumNodeHealthPolicy that
	// selects it; unset when none does.
	// +optional
	Health HealthState `json:"health,omitempty"`
	// Remediation is the current, or the last, step of the repair ladder.
	// +optional
	Remediation *RemediationStatus `json:"remediation,omitempty"`
	// RemediationHistory holds the last steps, newest first (at most 10),
	// which the isolation rule counts.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	RemediationHistory []RemediationStatus `json:"remediationHistory,omitempty"`
	// Binding is the Node a Reschedule moved the node to.
	// +optional
	Binding *NodeBinding `json:"binding,omitempty"`
	// Rollout follows the spec's revisions.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
}

// Printer columns. Services prints the whole list: the apiserver's table
// printer keeps only the first match of a JSONPath, so `.spec.services[*].name`
// would show one name however many services there are.
// +kubebuilder:printcolumn:name="Arch",type=string,JSONPath=`.spec.hardware.arch`
// +kubebuilder:printcolumn:name="Services",type=string,JSONPath=`.spec.services`,description="Every service, name and port"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Health",type=string,JSONPath=`.status.health`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// QuantumNode is a machine that runs a set of services, declared by its
// owner and reconciled by qn-controller.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=quantumnodes,singular=quantumnode,shortName=qn,scope=Namespaced
type QuantumNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec QuantumNodeSpec `json:"spec"`

	// Status is the observed state.
	// +optional
	Status QuantumNodeStatus `json:"status,omitempty"`
}

// QuantumNodeList is a list of QuantumNodes.
//
// +kubebuilder:object:root=true
type QuantumNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the QuantumNodes.
	Items []QuantumNode `json:"items"`
}
