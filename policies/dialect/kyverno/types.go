package kyverno

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The fields of kyverno.io/v1 ClusterPolicy and Policy this package reads,
// with Kyverno's JSON names. They are declared here rather than imported
// because Kyverno's API package links in its image-signing libraries (a
// 77 MB binary became 200 MB). Fields a policy may carry but that do not
// change a validate rule's verdict are accepted and ignored (webhook
// settings); every field that would change it is either honoured or
// refused by checkRule.

type policyDoc struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   policyMeta `json:"metadata"`
	Spec       spec       `json:"spec"`
	Status     any        `json:"status,omitempty"`
}

type policyMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp any               `json:"creationTimestamp,omitempty"`
	ManagedFields     any               `json:"managedFields,omitempty"`
}

type spec struct {
	Rules                            []ruleSpec `json:"rules"`
	ApplyRules                       string     `json:"applyRules,omitempty"`
	FailurePolicy                    string     `json:"failurePolicy,omitempty"`
	ValidationFailureAction          string     `json:"validationFailureAction,omitempty"`
	ValidationFailureActionOverrides []any      `json:"validationFailureActionOverrides,omitempty"`
	EmitWarning                      *bool      `json:"emitWarning,omitempty"`
	Admission                        *bool      `json:"admission,omitempty"`
	Background                       *bool      `json:"background,omitempty"`
	SchemaValidation                 *bool      `json:"schemaValidation,omitempty"`
	WebhookTimeoutSeconds            *int32     `json:"webhookTimeoutSeconds,omitempty"`
	WebhookConfiguration             any        `json:"webhookConfiguration,omitempty"`
	MutateExistingOnPolicyUpdate     bool       `json:"mutateExistingOnPolicyUpdate,omitempty"`
	GenerateExistingOnPolicyUpdate   *bool      `json:"generateExistingOnPolicyUpdate,omitempty"`
	GenerateExisting                 bool       `json:"generateExisting,omitempty"`
	UseServerSideApply               bool       `json:"useServerSideApply,omitempty"`
}

type ruleSpec struct {
	Name                   string            `json:"name"`
	Context                []contextEntry    `json:"context,omitempty"`
	ReportProperties       map[string]string `json:"reportProperties,omitempty"`
	Match                  matchResources    `json:"match"`
	Exclude                *matchResources   `json:"exclude,omitempty"`
	ImageExtractors        any               `json:"imageExtractors,omitempty"`
	Preconditions          any               `json:"preconditions,omitempty"`
	CELPreconditions       any               `json:"celPreconditions,omitempty"`
	Mutate                 any               `json:"mutate,omitempty"`
	Validate               *validation       `json:"validate,omitempty"`
	Generate               any               `json:"generate,omitempty"`
	VerifyImages           any               `json:"verifyImages,omitempty"`
	SkipBackgroundRequests *bool             `json:"skipBackgroundRequests,omitempty"`
}

type validation struct {
	FailureAction           string    `json:"failureAction,omitempty"`
	FailureActionOverrides  any       `json:"failureActionOverrides,omitempty"`
	AllowExistingViolations *bool     `json:"allowExistingViolations,omitempty"`
	Message                 string    `json:"message,omitempty"`
	Manifests               any       `json:"manifests,omitempty"`
	Foreach                 []foreach `json:"foreach,omitempty"`
	Pattern                 any       `json:"pattern,omitempty"`
	AnyPattern              any       `json:"anyPattern,omitempty"`
	Deny                    *deny     `json:"deny,omitempty"`
	PodSecurity             any       `json:"podSecurity,omitempty"`
	CEL                     any       `json:"cel,omitempty"`
	Assert                  any       `json:"assert,omitempty"`
}

type deny struct {
	Conditions any `json:"conditions,omitempty"`
}

type foreach struct {
	List          string         `json:"list"`
	ElementScope  *bool          `json:"elementScope,omitempty"`
	Context       []contextEntry `json:"context,omitempty"`
	Preconditions any            `json:"preconditions,omitempty"`
	Pattern       any            `json:"pattern,omitempty"`
	AnyPattern    any            `json:"anyPattern,omitempty"`
	Deny          *deny          `json:"deny,omitempty"`
	Foreach       []foreach      `json:"foreach,omitempty"`
}

type contextEntry struct {
	Name            string    `json:"name"`
	ConfigMap       any       `json:"configMap,omitempty"`
	APICall         any       `json:"apiCall,omitempty"`
	ImageRegistry   any       `json:"imageRegistry,omitempty"`
	Variable        *variable `json:"variable,omitempty"`
	GlobalReference any       `json:"globalReference,omitempty"`
}

type variable struct {
	Value    any    `json:"value,omitempty"`
	JMESPath string `json:"jmesPath,omitempty"`
	Default  any    `json:"default,omitempty"`
}

// matchResources is match or exclude: any, all, or one inline filter.
type matchResources struct {
	Any []resourceFilter `json:"any,omitempty"`
	All []resourceFilter `json:"all,omitempty"`
	resourceFilter
}

type resourceFilter struct {
	Subjects     []rbacv1.Subject    `json:"subjects,omitempty"`
	Roles        []string            `json:"roles,omitempty"`
	ClusterRoles []string            `json:"clusterRoles,omitempty"`
	Resources    resourceDescription `json:"resources,omitempty"`
}

type resourceDescription struct {
	Kinds             []string              `json:"kinds,omitempty"`
	Name              string                `json:"name,omitempty"`
	Names             []string              `json:"names,omitempty"`
	Namespaces        []string              `json:"namespaces,omitempty"`
	Annotations       map[string]string     `json:"annotations,omitempty"`
	Selector          *metav1.LabelSelector `json:"selector,omitempty"`
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	Operations        []string              `json:"operations,omitempty"`
}

func (f resourceFilter) empty() bool {
	r := f.Resources
	return len(f.Subjects) == 0 && len(f.Roles) == 0 && len(f.ClusterRoles) == 0 && len(r.Kinds) == 0 && r.Name == "" &&
		len(r.Names) == 0 && len(r.Namespaces) == 0 && len(r.Annotations) == 0 && r.Selector == nil && r.NamespaceSelector == nil && len(r.Operations) == 0
}

// filters are every filter of a match or exclude, with its field path.
func (m *matchResources) filters(at string) []namedFilter {
	if m == nil {
		return nil
	}
	out := []namedFilter{{at, m.resourceFilter}}
	for i, f := range m.Any {
		out = append(out, namedFilter{at + ".any[" + itoa(i) + "]", f})
	}
	for i, f := range m.All {
		out = append(out, namedFilter{at + ".all[" + itoa(i) + "]", f})
	}
	return out
}

type namedFilter struct {
	field  string
	filter resourceFilter
}
