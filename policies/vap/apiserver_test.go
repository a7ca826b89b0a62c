package vap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies/vap"
)

// apiServerPolicy is the compiled policy as the API server's
// ValidatingAdmissionPolicy plugin evaluates it, built from the plugin's own
// packages the way its compilePolicy does: the same CEL environment,
// variable composition, match conditions, message expressions and runtime
// cost budget. The tests through the real API server (test/vap) prove the
// objects there; this runs thousands of requests in a second.
type apiServerPolicy struct {
	validator validating.Validator
	params    runtime.Object
	// validations and messages are the validator's two condition
	// evaluators, kept to measure what a request costs (runtimeCost).
	validations, messages plugincel.ConditionEvaluator
}

// compileForAPIServer compiles r's policy in the CEL environment of
// Kubernetes v for the given environment type (NewExpressions is what an
// API server of v+1 checks a new policy against; StoredExpressions what it
// runs). Every expression that does not compile is an error.
func compileForAPIServer(t testing.TB, r *vap.Result, v *version.Version, mode environment.Type) (*apiServerPolicy, []string) {
	t.Helper()
	p := r.Policy
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(v))
	if err != nil {
		t.Fatal(err)
	}
	withAuthz := plugincel.OptionalVariableDeclarations{HasParams: true, HasAuthorizer: true}
	withoutAuthz := plugincel.OptionalVariableDeclarations{HasParams: true}
	var problems []string
	for _, v := range p.Spec.Variables {
		if res := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, withAuthz, mode); res.Error != nil {
			problems = append(problems, fmt.Sprintf("variables.%s: %v", v.Name, res.Error))
		}
	}
	check := func(what string, a plugincel.ExpressionAccessor, opts plugincel.OptionalVariableDeclarations) {
		if res := compiler.CompileCELExpression(a, opts, mode); res.Error != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", what, res.Error))
		}
	}
	var matchAccessors []plugincel.ExpressionAccessor
	for _, m := range p.Spec.MatchConditions {
		a := (*matchconditions.MatchCondition)(&m)
		check("matchConditions "+m.Name, a, withAuthz)
		matchAccessors = append(matchAccessors, a)
	}
	var validations, messages []plugincel.ExpressionAccessor
	for i, v := range p.Spec.Validations {
		va := &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		check(fmt.Sprintf("validations[%d]", i), va, withAuthz)
		validations = append(validations, va)
		var ma plugincel.ExpressionAccessor
		if v.MessageExpression != "" {
			ma = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
			check(fmt.Sprintf("validations[%d].messageExpression", i), ma, withoutAuthz)
		}
		messages = append(messages, ma)
	}
	matcher := matchconditions.NewMatcher(compiler.CompileCondition(matchAccessors, withAuthz, mode), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	validationConditions := compiler.CompileCondition(validations, withAuthz, mode)
	messageConditions := compiler.CompileCondition(messages, withoutAuthz, mode)
	validator := validating.NewValidator(
		validationConditions,
		matcher,
		compiler.CompileCondition(nil, withAuthz, mode),
		messageConditions,
		p.Spec.FailurePolicy, nil)
	params, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r.Params)
	if err != nil {
		t.Fatal(err)
	}
	return &apiServerPolicy{validator: validator, params: &unstructured.Unstructured{Object: params}, validations: validationConditions, messages: messageConditions}, problems
}

// request is one QuantumNode write as the API server admits it.
type request struct {
	op          admission.Operation
	user        string
	groups      []string
	namespace   string
	object, old map[string]any
}

// verdict is the policy's answer: denied with the first message (as the
// API server reports it), or admitted; an evaluation error is a test
// failure of its own.
type verdict struct {
	denied  bool
	message string
	errors  []string
}

func (p *apiServerPolicy) judge(t testing.TB, r request) verdict {
	t.Helper()
	versioned, ns := r.attributes()
	res := p.validator.Validate(context.Background(), qnv1alpha1.GroupVersionResource, versioned, p.params, ns, celconfig.RuntimeCELCostBudget, nil)
	var v verdict
	for _, d := range res.Decisions {
		if d.Evaluation == validating.EvalError {
			v.errors = append(v.errors, d.Message)
		}
		if d.Action == validating.ActionDeny && !v.denied {
			v.denied, v.message = true, d.Message
		}
	}
	return v
}

// runtimeCost is what r costs the policy's CEL in the API server's units,
// as its validator charges it: the validations (with the variables they
// read) against the request's budget of celconfig.RuntimeCELCostBudget,
// then the message expressions, which the validator evaluates for every
// request, from what remains. The match conditions run before, on their
// own budget. An error is an expression the API server would fail (over
// celconfig.PerCallLimit, or out of budget): the policy's failurePolicy
// then answers.
func (p *apiServerPolicy) runtimeCost(r request) (validations, messages int64, err error) {
	versioned, ns := r.attributes()
	req := plugincel.CreateAdmissionRequest(versioned.Attributes, metav1.GroupVersionResource(qnv1alpha1.GroupVersionResource), metav1.GroupVersionKind(qnv1alpha1.GroupVersionKind))
	nsObject := plugincel.CreateNamespaceObject(ns)
	budget := int64(celconfig.RuntimeCELCostBudget)
	for i, step := range []struct {
		conditions plugincel.ConditionEvaluator
		cost       *int64
	}{{p.validations, &validations}, {p.messages, &messages}} {
		results, remaining, err := step.conditions.ForInput(context.Background(), versioned, req, plugincel.OptionalVariableBindings{VersionedParams: p.params}, nsObject, budget)
		if err != nil {
			return 0, 0, err
		}
		for _, res := range results {
			// A message expression of a validation that passed may fail
			// (it reads the refusal there is none of): the validator
			// never reads it. Running out of budget fails either.
			if res.Error != nil && (i == 0 || strings.Contains(res.Error.Error(), "cost") || strings.Contains(res.Error.Error(), "budget")) {
				return 0, 0, fmt.Errorf("%q: %w", res.ExpressionAccessor.GetExpression(), res.Error)
			}
		}
		*step.cost, budget = budget-remaining, remaining
	}
	return validations, messages, nil
}

// attributes is r as the API server's admission plugins see it.
func (r request) attributes() (*admission.VersionedAttributes, *corev1.Namespace) {
	gvk := qnv1alpha1.GroupVersionKind
	gvr := qnv1alpha1.GroupVersionResource
	var obj, old runtime.Object
	name := ""
	if r.object != nil {
		obj = &unstructured.Unstructured{Object: r.object}
		name = obj.(*unstructured.Unstructured).GetName()
	}
	if r.old != nil {
		old = &unstructured.Unstructured{Object: r.old}
		name = old.(*unstructured.Unstructured).GetName()
	}
	attrs := admission.NewAttributesRecord(obj, old, gvk, r.namespace, name, gvr, "", r.op, nil, false, &user.DefaultInfo{Name: r.user, Groups: r.groups})
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedObject: obj, VersionedOldObject: old, VersionedKind: gvk}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.namespace, Labels: map[string]string{"kubernetes.io/metadata.name": r.namespace}}}
	return versioned, ns
}

// node is a valid QuantumNode in namespace edge with the given annotations
// and labels.
func node(name string, annotations, labels map[string]string) map[string]any {
	meta := map[string]any{"name": name, "namespace": "edge"}
	if annotations != nil {
		meta["annotations"] = toAny(annotations)
	}
	if labels != nil {
		meta["labels"] = toAny(labels)
	}
	return map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": meta,
		"spec": map[string]any{"hardware": map[string]any{"arch": "arm64"}, "services": []any{map[string]any{"name": "mqtt", "port": int64(8883)}}},
	}
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// failurePolicyOf is the policy's failurePolicy, for messages.
func failurePolicyOf(p *admissionregistrationv1.ValidatingAdmissionPolicy) string {
	if p.Spec.FailurePolicy == nil {
		return "Fail"
	}
	return string(*p.Spec.FailurePolicy)
}

// jsonString is v as compact JSON, for messages.
func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return strings.TrimSpace(string(b))
}
