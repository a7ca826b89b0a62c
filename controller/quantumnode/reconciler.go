// Package quantumnode is the QuantumNode reconcile: it keeps the Service
// that exposes a node's declared services in the declared shape, finds the
// Kubernetes Node the QuantumNode runs on, runs the steps of the other
// rooms (the audit, the health step, the rollout) into the status it
// computes, and writes that status once, through the status subresource,
// when it says something new and the node is quiescent.
//
// The status is a pure function of what the API server holds
// (computeStatus); the reconciler only gathers the inputs, makes the
// Service right and writes the result when it differs. No state lives
// outside the API server, so any replica that wins the leader election can
// take over at once.
package quantumnode

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/controller/audit"
	"github.com/quantumnode/qn-admission/controller/rollout"
	"github.com/quantumnode/qn-admission/controller/selfheal"
	probes "github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/internal/promreg"
	"github.com/quantumnode/qn-admission/policies"
)

// Reconciler makes a QuantumNode's Service match its spec and its status
// match the facts. Build it with its fields and call SetupWithManager; zero
// fields take their value from the manager.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// Scheme resolves the QuantumNode's kind for owner references.
	Scheme *runtime.Scheme
	// Recorder emits events on phase transitions and Service writes.
	Recorder events.EventRecorder
	// Clock stamps condition transitions; injected so tests can fix time.
	Clock clock.PassiveClock
	// Metrics receives the QuantumNodes-by-phase gauge; nil means the
	// manager's metrics registry, which serves /metrics.
	Metrics prometheus.Registerer
	// MaxConcurrentReconciles bounds parallel reconciles; 0 means 1.
	MaxConcurrentReconciles int

	// Policies, when set, judges every stored QuantumNode with the
	// admission engine (the background audit): the PolicyCompliant
	// condition, a Warning event on a change to non-compliant.
	Policies *policies.Engine
	// Audit, when set with Policies, re-audits every node when the policy
	// revision changes and periodically, paced, and keeps the PolicyReports.
	Audit *audit.Options
	// QuiescenceWindow holds status writes until a node's generation and
	// conditions have been still for this long; 0 writes at once.
	QuiescenceWindow time.Duration
	// MaxRequeueDelay caps the wait for quiescence (default 30s).
	MaxRequeueDelay time.Duration
	// Answers, when set, counts reconciles and failed ones (a lost write
	// race is not a failure) for strict health's error ratio.
	Answers *probes.Answers

	// ProbeWorkers bounds the active health checks running at once; 0
	// means 16.
	ProbeWorkers int

	quiet    *quiescence
	services services
	nodes    nodes
	// The steps of the other rooms, run in this order; audit is nil
	// without Policies.
	audit   *audit.Step
	heal    *selfheal.Step
	rollout *rollout.Follower
}

// SetupWithManager registers the field indexes, the phase gauge, the
// steps and the controller with its watches: QuantumNodes, the Services
// they own (and a foreign Service that blocks one), the Nodes they run on,
// and what each step hears.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(controller.ManagerName)
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Metrics == nil {
		r.Metrics = ctrlmetrics.Registry
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &qnv1alpha1.QuantumNode{}, controller.NodeKeyIndex, controller.NodeKeyOf); err != nil {
		return fmt.Errorf("index QuantumNodes by the Node they name: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Node{}, nodeLabelIndex, nodeLabelOf); err != nil {
		return fmt.Errorf("index Nodes by their %s label: %w", qnv1alpha1.NodeLabel, err)
	}
	if err := promreg.RegisterReplacing(r.Metrics, newPhaseCollector(mgr.GetCache())); err != nil {
		return fmt.Errorf("register the QuantumNodes-by-phase gauge: %w", err)
	}
	r.quiet = newQuiescence(r.QuiescenceWindow, r.MaxRequeueDelay)
	r.services = services{client: r.Client, scheme: r.Scheme, recorder: r.Recorder}
	r.nodes = nodes{client: r.Client, recorder: r.Recorder}
	var err error
	r.heal, err = selfheal.New(ctx, mgr, selfheal.Options{Client: r.Client, Recorder: r.Recorder, Clock: r.Clock, Metrics: r.Metrics, ProbeWorkers: r.ProbeWorkers})
	if err != nil {
		return err
	}
	if r.rollout, err = rollout.NewFollower(ctx, mgr, r.Client, r.Recorder, r.Metrics); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Policies != nil {
		if r.audit, err = audit.New(mgr, r.Policies, r.Audit, r.Recorder, r.Metrics); err != nil {
			return err
		}
		b = r.audit.Watch(b)
	}
	b = b.
		Named("quantumnode").
		For(&qnv1alpha1.QuantumNode{}).
		Owns(&corev1.Service{}).
		Watches(&corev1.Service{}, foreignServiceHandler(r.Client)).
		Watches(&corev1.Node{}, nodeHandler(r.Client), builder.WithPredicates(nodeFactsChanged())).
		Watches(&qnv1alpha1.QuantumNode{}, claimHandler(r.Client)).
		WithOptions(ctrlcontroller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1)})
	if err := r.rollout.Watch(r.heal.Watch(b)).Complete(r); err != nil {
		return fmt.Errorf("build the quantumnode controller: %w", err)
	}
	return nil
}

// Reconcile brings one QuantumNode's Service to its declared shape and
// writes its status when the facts say something new. An error makes the
// manager retry with exponential backoff.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if r.Answers != nil {
		r.Answers.Record(err != nil)
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	qn := &qnv1alpha1.QuantumNode{}
	if err := r.Client.Get(ctx, req.NamespacedName, qn); err != nil {
		// Gone: its Service goes with it through the owner reference.
		if apierrors.IsNotFound(err) {
			r.quiet.forget(req.NamespacedName)
			r.heal.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !qn.DeletionTimestamp.IsZero() {
		// Being deleted: recreating its Service would only fight the
		// garbage collector; checking its ports is pointless.
		r.heal.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	svc, err := r.services.ensure(ctx, qn)
	if err != nil {
		return ctrl.Result{}, err
	}
	node, err := r.nodes.find(ctx, qn)
	if err != nil {
		return ctrl.Result{}, err
	}

	claimant, err := r.nodes.earlierClaimant(ctx, qn)
	if err != nil {
		return ctrl.Result{}, err
	}

	now := metav1.NewTime(r.Clock.Now())
	status := computeStatus(qn, node, svc, now)
	if claimant != nil {
		markClaimed(&status, qn, claimant, now)
		r.nodes.reportClaim(qn, claimant)
	}
	if b := status.Binding; b != nil && (node == nil || b.NodeName != node.Name) {
		// The spec or the label moved on since the Reschedule (or the new
		// Node is gone): they win.
		status.Binding = nil
	}
	fx, rollback, err := r.runSteps(ctx, qn, node, &status, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.writeStatus(ctx, qn, status, now.Time, fx, rollback)
}

// runSteps runs the other rooms' steps into status, in order, and joins
// their effects: the audit, the health step, the rollout (which reads the
// health the step before judged).
func (r *Reconciler) runSteps(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, status *qnv1alpha1.QuantumNodeStatus, now metav1.Time) (controller.Effects, *rollout.PendingRollback, error) {
	var fx controller.Effects
	if r.audit != nil {
		judged, err := r.audit.Judge(ctx, qn, status, now)
		if err != nil {
			return fx, nil, err
		}
		fx.Add(judged)
	}
	heal, err := r.heal.Assess(ctx, qn, node, status, now.Time)
	if err != nil {
		return fx, nil, err
	}
	fx.Add(heal.Effects)
	followed, err := r.rollout.Follow(ctx, qn, status, now.Time, rollout.Judged{Health: heal.Judged, AutoRollback: heal.AutoRollback})
	if err != nil {
		return fx, nil, err
	}
	fx.Add(followed.Effects)
	return fx, followed.Rollback, nil
}

// writeStatus is the reconcile's one status write: held back until the
// node is quiescent unless a step says it is urgent, after the spec's
// rollback when one is pending, and followed by the events and the
// steps' effects.
func (r *Reconciler) writeStatus(ctx context.Context, qn *qnv1alpha1.QuantumNode, status qnv1alpha1.QuantumNodeStatus, now time.Time, fx controller.Effects, rollback *rollout.PendingRollback) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	result := ctrl.Result{RequeueAfter: fx.RequeueAfter}
	if equality.Semantic.DeepEqual(qn.Status, status) {
		return runEffects(ctx, result, fx, qn)
	}
	if wait, held := r.quiet.hold(qn, now); held && !fx.Urgent {
		logger.V(1).Info("status change held until the QuantumNode is quiescent", "after", wait)
		return ctrl.Result{RequeueAfter: controller.Earliest(wait, fx.RequeueAfter)}, nil
	}
	if rollback != nil {
		// The spec goes back first; the status that records the rollback
		// is then written on top of the stored result.
		patched, err := r.rollout.Apply(ctx, qn, &status, rollback)
		if err != nil {
			return ctrl.Result{}, err
		}
		qn = patched
	}
	updated := qn.DeepCopy()
	updated.Status = status
	// The optimistic lock makes a write based on a stale read fail instead of
	// overwriting a newer status.
	patch := client.MergeFromWithOptions(qn, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, updated, patch, client.FieldOwner(controller.ManagerName)); err != nil {
		if apierrors.IsConflict(err) {
			// A newer QuantumNode exists, so its update event is already
			// queued and will reconcile again with fresh facts.
			logger.V(1).Info("status write lost a race with a newer version; the next reconcile redoes it")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("write status of QuantumNode %s: %w", client.ObjectKeyFromObject(qn), err)
	}
	if from, to := qn.Status.Phase, status.Phase; from != to {
		r.recordTransition(updated, from, to)
		logger.Info("phase changed", "from", from, "to", to, "reason", readyCondition(status).Reason)
	}
	return runEffects(ctx, result, fx, updated)
}

// runEffects runs the steps' effects on the stored QuantumNode; a
// look-again they ask for joins the result.
func runEffects(ctx context.Context, result ctrl.Result, fx controller.Effects, qn *qnv1alpha1.QuantumNode) (ctrl.Result, error) {
	again, err := fx.Run(ctx, qn)
	result.RequeueAfter = controller.Earliest(result.RequeueAfter, again)
	return result, err
}

// recordTransition emits one event per phase change, after the status write
// succeeded, so events and stored status never disagree. Failed is a
// Warning: it waits for a person.
func (r *Reconciler) recordTransition(qn *qnv1alpha1.QuantumNode, from, to qnv1alpha1.Phase) {
	eventType := corev1.EventTypeNormal
	if to == qnv1alpha1.PhaseFailed {
		eventType = corev1.EventTypeWarning
	}
	ready := readyCondition(qn.Status)
	if from == "" {
		from = "none"
	}
	r.Recorder.Eventf(qn, nil, eventType, ready.Reason, "UpdatePhase", "phase %s → %s: %s", from, to, ready.Message)
}

func readyCondition(status qnv1alpha1.QuantumNodeStatus) metav1.Condition {
	for _, c := range status.Conditions {
		if c.Type == qnv1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}
