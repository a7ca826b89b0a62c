package controller

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
)

// maxConditionMessage bounds the condition message; the PolicyReport has
// every violation in full.
const maxConditionMessage = 4096

// auditObject converts a QuantumNode to the object policies see: the
// apiserver's JSON form, with apiVersion and kind, which typed objects read
// from the cache lack.
func auditObject(qn *qnv1alpha1.QuantumNode) (map[string]any, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(qn)
	if err != nil {
		return nil, fmt.Errorf("convert QuantumNode %s/%s for the audit: %w", qn.Namespace, qn.Name, err)
	}
	obj["apiVersion"] = qnv1alpha1.GroupVersion.String()
	obj["kind"] = qnv1alpha1.GroupVersionKind.Kind
	return obj, nil
}

// auditNode judges qn with the engine; ok is false when it could not be
// converted (never for an object read from the apiserver).
func auditNode(ctx context.Context, engine *policies.Engine, qn *qnv1alpha1.QuantumNode) (policies.AuditResult, error) {
	obj, err := auditObject(qn)
	if err != nil {
		return policies.AuditResult{}, err
	}
	return engine.Audit(ctx, obj), nil
}

// policyCompliantCondition turns an audit into the PolicyCompliant
// condition of a node of generation gen. The message names the policy
// revision, the role and every violation, so `kubectl describe` answers
// why without the report.
func policyCompliantCondition(res policies.AuditResult, gen int64) metav1.Condition {
	c := metav1.Condition{Type: qnv1alpha1.ConditionPolicyCompliant, ObservedGeneration: gen}
	judged := fmt.Sprintf("policy revision %s, role %q", res.Revision, res.Role)
	skipped := res.Count(policies.VerdictSkip)
	note := ""
	if skipped > 0 {
		note = fmt.Sprintf(" (%d rules that read the requester are judged only at admission)", skipped)
	}
	switch {
	case res.Exempt != "":
		c.Status, c.Reason = metav1.ConditionUnknown, qnv1alpha1.ReasonExempt
		c.Message = fmt.Sprintf("not judged: exempt by the role table (%s), policy revision %s", res.Exempt, res.Revision)
	case res.Count(policies.VerdictFail) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, qnv1alpha1.ReasonPolicyViolation
		c.Message = fmt.Sprintf("violates %s: %s", judged, strings.Join(failMessages(res, policies.VerdictFail), "; "))
	case res.Count(policies.VerdictError) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, qnv1alpha1.ReasonPolicyError
		c.Message = fmt.Sprintf("could not be judged by %s: %s", judged, strings.Join(failMessages(res, policies.VerdictError), "; "))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, qnv1alpha1.ReasonCompliant
		c.Message = "complies with " + judged + note
	}
	if len(c.Message) > maxConditionMessage {
		c.Message = c.Message[:maxConditionMessage-len("… (truncated; see the PolicyReport)")] + "… (truncated; see the PolicyReport)"
	}
	return c
}

// failMessages lists the messages of the rules with verdict v, each with
// its package, so a person knows which policy to read.
func failMessages(res policies.AuditResult, v policies.Verdict) []string {
	var out []string
	for _, rr := range res.Rules {
		if rr.Verdict != v {
			continue
		}
		for _, m := range rr.Messages {
			out = append(out, fmt.Sprintf("[%s] %s", rr.Package, m))
		}
	}
	return out
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
