// Package audit is the background audit: the step of the QuantumNode
// reconcile that judges the stored node with the admission engine (the
// PolicyCompliant condition and its events), the sweeper that re-audits
// every node when the served policy revision changes and periodically,
// and the PolicyReports, one per namespace.
package audit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/policies"
)

// Step is the audit's part of the QuantumNode reconcile: it judges the
// node and writes PolicyCompliant into the status the reconcile is
// building, and emits the compliance events once that status is stored.
type Step struct {
	engine   *policies.Engine
	recorder events.EventRecorder
	metrics  *metrics
	// sweeps queue nodes for a new audit; nil without Options.
	sweeps source.Source
}

// New registers the audit's metrics and returns its step, judging with
// engine. With opts it also adds the sweeper, and the report controller
// when opts.Reports asks for it, to mgr.
func New(mgr ctrl.Manager, engine *policies.Engine, opts *Options, recorder events.EventRecorder, reg prometheus.Registerer) (*Step, error) {
	m, err := newMetrics(reg, mgr.GetCache())
	if err != nil {
		return nil, err
	}
	s := &Step{engine: engine, recorder: recorder, metrics: m}
	if opts != nil {
		if s.sweeps, err = setupSweeps(mgr, engine, *opts, m); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Watch adds the sweeper's queue to the QuantumNode controller's sources.
func (s *Step) Watch(b *builder.Builder) *builder.Builder {
	if s.sweeps == nil {
		return b
	}
	return b.WatchesRawSource(s.sweeps)
}

// Judge audits qn and sets its PolicyCompliant condition in status, as of
// now; the effects emit an event on a change of verdict, after the write.
func (s *Step) Judge(ctx context.Context, qn *qnv1alpha1.QuantumNode, status *qnv1alpha1.QuantumNodeStatus, now metav1.Time) (controller.Effects, error) {
	var fx controller.Effects
	start := time.Now()
	res, err := auditNode(ctx, s.engine, qn)
	if err != nil {
		return fx, err
	}
	s.metrics.audited(time.Since(start))
	c := policyCompliantCondition(res, qn.Generation)
	c.LastTransitionTime = now
	meta.SetStatusCondition(&status.Conditions, c)
	var before *metav1.Condition
	if b := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionPolicyCompliant); b != nil {
		was := *b
		before = &was
	}
	fx.Then(func(_ context.Context, stored *qnv1alpha1.QuantumNode) error {
		s.record(stored, before, &c)
		return nil
	})
	return fx, nil
}

// record emits a Warning event when the audit finds a node newly
// non-compliant (after the status write, so event and status agree), and a
// Normal one when it complies again.
func (s *Step) record(qn *qnv1alpha1.QuantumNode, before, after *metav1.Condition) {
	if after == nil || (before != nil && before.Status == after.Status && before.Reason == after.Reason) {
		return
	}
	switch {
	case after.Status == metav1.ConditionFalse:
		s.recorder.Eventf(qn, nil, corev1.EventTypeWarning, after.Reason, "AuditPolicies", "%s", after.Message)
	case before != nil && before.Status == metav1.ConditionFalse && after.Status == metav1.ConditionTrue:
		s.recorder.Eventf(qn, nil, corev1.EventTypeNormal, after.Reason, "AuditPolicies", "%s", after.Message)
	}
}

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
