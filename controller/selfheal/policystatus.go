package selfheal

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/controller/health"
	"github.com/quantumnode/qn-admission/controller/remediation"
)

// policyStatus writes each policy's census and whether its guards let it
// remediate; the census it takes is the one the guards read.
type policyStatus struct {
	client   client.Client
	books    *remediation.Books
	metrics  *metrics
	recorder events.EventRecorder
	clock    clock.PassiveClock
}

// censusInterval is the least time between two censuses of the nodes:
// each reads every QuantumNode in the cache.
const censusInterval = time.Second

// Reconcile implements reconcile.Reconciler.
func (p *policyStatus) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	policy := &qnv1alpha1.QuantumNodeHealthPolicy{}
	if err := p.client.Get(ctx, req.NamespacedName, policy); err != nil {
		if apierrors.IsNotFound(err) {
			p.metrics.forgetPolicy(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	list := &qnv1alpha1.QuantumNodeHealthPolicyList{}
	if err := p.client.List(ctx, list); err != nil {
		return ctrl.Result{}, fmt.Errorf("list QuantumNodeHealthPolicies: %w", err)
	}
	// Node events arrive in bursts; one census (a pass over every cached
	// QuantumNode) per censusInterval answers all of them.
	if c, ok := p.books.Cached(policy.Name); ok {
		if age := p.clock.Now().Sub(c.At); age < censusInterval {
			return ctrl.Result{RequeueAfter: censusInterval - age}, nil
		}
	}
	all, err := p.books.Count(ctx, health.Compile(list.Items))
	if err != nil {
		return ctrl.Result{}, err
	}
	census := all[policy.Name]
	settings, problems := health.Resolve(&policy.Spec)
	if _, err := metav1.LabelSelectorAsSelector(&policy.Spec.Selector); err != nil {
		problems = append(problems, fmt.Sprintf("spec.selector does not compile, so the policy selects nothing: %v", err))
	}
	cond, tooMany := remediationAllowed(policy, settings.Ladder, census, p.clock.Now())
	p.metrics.setBlocked(policy.Name, settings.Ladder.Remediates() && tooMany)

	status := *policy.Status.DeepCopy()
	status.ObservedGeneration = policy.Generation
	status.SelectedNodes = int32(census.Selected)
	status.HealthyNodes = int32(census.Healthy)
	status.UnhealthyNodes = int32(census.Unhealthy)
	status.IsolatedNodes = int32(census.Isolated)
	status.RemediationsInFlight = int32(census.InFlight)
	meta.SetStatusCondition(&status.Conditions, cond)
	if equality.Semantic.DeepEqual(status, policy.Status) {
		return ctrl.Result{}, nil
	}
	updated := policy.DeepCopy()
	updated.Status = status
	patch := client.MergeFromWithOptions(policy, client.MergeFromWithOptimisticLock{})
	if err := p.client.Status().Patch(ctx, updated, patch, client.FieldOwner(controller.ManagerName)); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, fmt.Errorf("write status of QuantumNodeHealthPolicy %s: %w", policy.Name, err)
	}
	if policy.Status.ObservedGeneration != policy.Generation {
		for _, problem := range problems {
			p.recorder.Eventf(updated, nil, corev1.EventTypeWarning, qnv1alpha1.EventPolicyCorrected, "ResolvePolicy", "%s", problem)
		}
	}
	if before := meta.FindStatusCondition(policy.Status.Conditions, qnv1alpha1.ConditionRemediationAllowed); before == nil || before.Reason != cond.Reason {
		kind := corev1.EventTypeNormal
		if cond.Reason == qnv1alpha1.ReasonTooManyUnhealthy {
			kind = corev1.EventTypeWarning
		}
		p.recorder.Eventf(updated, nil, kind, cond.Reason, "GuardRemediation", "%s", cond.Message)
	}
	return ctrl.Result{}, nil
}

// remediationAllowed is the policy's RemediationAllowed condition as of
// now, given its census; tooMany says more than maxUnhealthy of its nodes
// are unhealthy.
func remediationAllowed(policy *qnv1alpha1.QuantumNodeHealthPolicy, ladder health.Ladder, census remediation.Census, now time.Time) (cond metav1.Condition, tooMany bool) {
	allowed := ladder.AllowedUnhealthy(census.Selected)
	cond = metav1.Condition{Type: qnv1alpha1.ConditionRemediationAllowed, Status: metav1.ConditionTrue, Reason: qnv1alpha1.ReasonRemediationAllowed,
		ObservedGeneration: policy.Generation, LastTransitionTime: metav1.NewTime(now)}
	tooMany = census.Unhealthy > allowed
	why, paused := policy.Annotations[qnv1alpha1.AnnotationPauseRemediation]
	switch {
	case !ladder.Remediates():
		cond.Status, cond.Reason = metav1.ConditionFalse, qnv1alpha1.ReasonReportOnly
		cond.Message = "the policy has no remediation step: health is reported, nothing is repaired"
	case paused:
		cond.Status, cond.Reason = metav1.ConditionFalse, qnv1alpha1.ReasonRemediationPaused
		cond.Message = fmt.Sprintf("paused by annotation %s: %q", qnv1alpha1.AnnotationPauseRemediation, why)
	case tooMany:
		cond.Status, cond.Reason = metav1.ConditionFalse, qnv1alpha1.ReasonTooManyUnhealthy
		cond.Message = fmt.Sprintf("%d of %d nodes are unhealthy, more than maxUnhealthy %s (%d): nothing is remediated until at most %d are",
			census.Unhealthy, census.Selected, ladder.MaxUnhealthy.String(), allowed, allowed)
	default:
		cond.Message = fmt.Sprintf("%d of %d nodes are unhealthy, within maxUnhealthy %s (%d)", census.Unhealthy, census.Selected, ladder.MaxUnhealthy.String(), allowed)
	}
	return cond, tooMany
}

// everyPolicy maps a QuantumNode event to every policy: a node's labels
// decide which policy counts it, and a relabelled node leaves one policy
// for another. Policies are few.
func everyPolicy(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := &qnv1alpha1.QuantumNodeHealthPolicyList{}
		if err := c.List(ctx, list); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}}
		}
		return reqs
	})
}

// healthCounted lets through QuantumNode changes a census can see: health,
// a step starting or ending, labels; creates and deletes.
func healthCounted() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*qnv1alpha1.QuantumNode)
			n, ok2 := e.ObjectNew.(*qnv1alpha1.QuantumNode)
			if !ok1 || !ok2 {
				return true
			}
			return o.Status.Health != n.Status.Health || !maps.Equal(o.Labels, n.Labels) ||
				len(remediation.InFlightOf(o)) != len(remediation.InFlightOf(n))
		},
	}
}
