package admissionpolicy

import (
	"encoding/json"

	celgo "github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
)

// validatingPolicy is Kyverno's policies.kyverno.io ValidatingPolicy
// (v1alpha1, v1beta1 and v1 share the shape), declared here so that its
// fields are decoded strictly without linking Kyverno's API module.
type validatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              validatingPolicySpec `json:"spec"`
	// Status is what a cluster wrote; read and left alone.
	Status json.RawMessage `json:"status,omitempty"`
}

type validatingPolicySpec struct {
	MatchConstraints     *admissionregistrationv1.MatchResources    `json:"matchConstraints,omitempty"`
	Validations          []admissionregistrationv1.Validation       `json:"validations,omitempty"`
	FailurePolicy        *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`
	AuditAnnotations     []admissionregistrationv1.AuditAnnotation  `json:"auditAnnotations,omitempty"`
	MatchConditions      []admissionregistrationv1.MatchCondition   `json:"matchConditions,omitempty"`
	Variables            []admissionregistrationv1.Variable         `json:"variables,omitempty"`
	AutogenConfiguration *autogenConfiguration                      `json:"autogen,omitempty"`
	ValidationActions    []admissionregistrationv1.ValidationAction `json:"validationActions,omitempty"`
	WebhookConfiguration *struct {
		TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
	} `json:"webhookConfiguration,omitempty"`
	Evaluation *evaluationConfiguration `json:"evaluation,omitempty"`
}

type autogenConfiguration struct {
	PodControllers *struct {
		Controllers []string `json:"controllers,omitempty"`
	} `json:"podControllers,omitempty"`
	ValidatingAdmissionPolicy *struct {
		Enabled *bool `json:"enabled,omitempty"`
	} `json:"validatingAdmissionPolicy,omitempty"`
}

type evaluationConfiguration struct {
	Mode      string `json:"mode,omitempty"`
	Admission *struct {
		Enabled *bool `json:"enabled,omitempty"`
	} `json:"admission,omitempty"`
	Background *struct {
		Enabled *bool `json:"enabled,omitempty"`
	} `json:"background,omitempty"`
}

// The expressions of a policy as the API server's CEL compiler takes
// them: each says what it must evaluate to. They mirror the validating
// admission plugin's own (k8s.io/apiserver/pkg/admission/plugin/policy/validating),
// which this package does not link: that package brings client-go's typed
// clients and informers, several hundred packages, into qn-webhook.

type validationCondition struct {
	expression, message string
	reason              *metav1.StatusReason
	// messageExpression is the validation's, compiled apart (messageCondition).
	messageExpression string
}

func (v *validationCondition) GetExpression() string      { return v.expression }
func (v *validationCondition) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.BoolType} }
func (m *messageCondition) GetExpression() string         { return m.expression }
func (m *messageCondition) ReturnTypes() []*celgo.Type    { return []*celgo.Type{celgo.StringType} }
func (a *auditAnnotationCondition) GetExpression() string { return a.valueExpression }
func (a *auditAnnotationCondition) ReturnTypes() []*celgo.Type {
	return []*celgo.Type{celgo.StringType, celgo.NullType}
}
func (v *variable) GetExpression() string      { return v.expression }
func (v *variable) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.AnyType, celgo.DynType} }
func (v *variable) GetName() string            { return v.name }

type messageCondition struct{ expression string }

type auditAnnotationCondition struct{ key, valueExpression string }

type variable struct{ name, expression string }

var (
	_ plugincel.ExpressionAccessor      = (*validationCondition)(nil)
	_ plugincel.NamedExpressionAccessor = (*variable)(nil)
)
