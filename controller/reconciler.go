package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller/health"
	"github.com/quantumnode/qn-admission/controller/remediation"
	probes "github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/policies"
)

// Reconciler makes a QuantumNode's Service match its spec and its status
// match the facts. Build it with its fields and call SetupWithManager; zero
// fields take their value from the manager. The RBAC markers
// config/rbac/role.yaml is generated from sit above Reconcile.
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
	Audit *AuditOptions
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

	quiet       *quiescence
	metrics     *auditMetrics
	prober      *health.Prober
	books       *remediation.Books
	effects     *remediation.Effects
	selfMetrics *selfHealMetrics
}

// NewScheme returns a scheme with every type the controller reads or writes:
// the built-in kinds (Service, Node, Event, Pod, EndpointSlice,
// ControllerRevision) and the qn.dev kinds.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add built-in kinds to the scheme: %w", err)
	}
	if err := qnv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add %s to the scheme: %w", qnv1alpha1.GroupVersion, err)
	}
	return scheme, nil
}

// SetupWithManager registers the field index, the phase gauge and the
// controller with its watches: QuantumNodes, the Services they own (and a
// foreign Service that blocks one), and the Nodes they run on.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(managerName)
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Metrics == nil {
		r.Metrics = ctrlmetrics.Registry
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &qnv1alpha1.QuantumNode{}, nodeKeyIndex, nodeKeyOf); err != nil {
		return fmt.Errorf("index QuantumNodes by the Node they name: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Node{}, nodeLabelIndex, nodeLabelOf); err != nil {
		return fmt.Errorf("index Nodes by their %s label: %w", qnv1alpha1.NodeLabel, err)
	}
	if err := registerReplacing(r.Metrics, newPhaseCollector(mgr.GetCache())); err != nil {
		return fmt.Errorf("register the QuantumNodes-by-phase gauge: %w", err)
	}
	r.quiet = newQuiescence(r.QuiescenceWindow, r.MaxRequeueDelay)
	healing, err := r.setupSelfHealing(ctx, mgr)
	if err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Policies != nil {
		var err error
		if r.metrics, err = newAuditMetrics(r.Metrics, mgr.GetCache()); err != nil {
			return err
		}
		if r.Audit != nil {
			sweeps, err := r.setupAudit(mgr)
			if err != nil {
				return err
			}
			b = b.WatchesRawSource(sweeps)
		}
	}
	err = b.
		Named("quantumnode").
		For(&qnv1alpha1.QuantumNode{}).
		Owns(&corev1.Service{}).
		Owns(&appsv1.ControllerRevision{}).
		Watches(&corev1.Service{}, foreignServiceHandler(r.Client)).
		Watches(&corev1.Node{}, nodeHandler(r.Client), builder.WithPredicates(nodeFactsChanged())).
		Watches(&discoveryv1.EndpointSlice{}, endpointSliceHandler(r.Client)).
		Watches(&qnv1alpha1.QuantumNodeHealthPolicy{}, healthPolicyHandler(r.Client), builder.WithPredicates(policyChanged())).
		WatchesRawSource(healing).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("build the quantumnode controller: %w", err)
	}
	return nil
}

// Everything the process does, the audit's PolicyReports and the
// command's leader election included, is listed here, in one place;
// `make rbac` generates config/rbac/role.yaml from these markers (a
// free-standing comment: controller-gen reads package-level markers).
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnodes/status,verbs=update;patch
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnodehealthpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnodehealthpolicies/status,verbs=update;patch
// +kubebuilder:rbac:groups=qn.dev,resources=quantumnoderoletables,verbs=get;create;update;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=wgpolicyk8s.io,resources=policyreports,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=qn-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=qn-system,resources=leases,resourceNames=qn-controller.qn.dev,verbs=get;update
// +kubebuilder:rbac:groups="",namespace=qn-system,resources=events,verbs=create;patch

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
	logger := log.FromContext(ctx)
	qn := &qnv1alpha1.QuantumNode{}
	if err := r.Client.Get(ctx, req.NamespacedName, qn); err != nil {
		// Gone: its Service goes with it through the owner reference.
		if apierrors.IsNotFound(err) {
			r.quiet.forget(req.NamespacedName)
			r.forgetHealth(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !qn.DeletionTimestamp.IsZero() {
		// Being deleted: recreating its Service would only fight the
		// garbage collector; checking its ports is pointless.
		r.forgetHealth(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	svc, err := r.ensureService(ctx, qn)
	if err != nil {
		return ctrl.Result{}, err
	}
	node, err := r.findNode(ctx, qn)
	if err != nil {
		return ctrl.Result{}, err
	}

	now := metav1.NewTime(r.Clock.Now())
	status := computeStatus(qn, node, svc, now)
	if b := status.Binding; b != nil && (node == nil || b.NodeName != node.Name) {
		// The spec or the label moved on since the Reschedule (or the new
		// Node is gone): they win.
		status.Binding = nil
	}
	if r.Policies != nil {
		start := time.Now()
		res, err := auditNode(ctx, r.Policies, qn)
		if err != nil {
			return ctrl.Result{}, err
		}
		r.metrics.audited(time.Since(start))
		c := policyCompliantCondition(res, qn.Generation)
		c.LastTransitionTime = now
		meta.SetStatusCondition(&status.Conditions, c)
	}
	heal, err := r.selfHeal(ctx, qn, node, &status, now.Time)
	if err != nil {
		return ctrl.Result{}, err
	}
	result := ctrl.Result{RequeueAfter: heal.requeue}
	if equality.Semantic.DeepEqual(qn.Status, status) {
		return result, r.afterStatus(ctx, qn, heal)
	}
	if wait, held := r.quiet.hold(qn, now.Time); held && !heal.urgent {
		logger.V(1).Info("status change held until the QuantumNode is quiescent", "after", wait)
		return ctrl.Result{RequeueAfter: earliestWait(wait, heal.requeue)}, nil
	}
	if heal.rollback != nil {
		// The spec goes back first; the status that records the rollback
		// is then written on top of the stored result.
		patched, err := r.applyRollback(ctx, qn, &status, heal.rollback)
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
	if err := r.Client.Status().Patch(ctx, updated, patch, client.FieldOwner(managerName)); err != nil {
		if apierrors.IsConflict(err) {
			// A newer QuantumNode exists, so its update event is already
			// queued and will reconcile again with fresh facts.
			logger.V(1).Info("status write lost a race with a newer version; the next reconcile redoes it")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("write status of QuantumNode %s: %w", req.NamespacedName, err)
	}
	if from, to := qn.Status.Phase, status.Phase; from != to {
		r.recordTransition(updated, from, to)
		logger.Info("phase changed", "from", from, "to", to, "reason", readyReason(status))
	}
	r.recordCompliance(updated, findCondition(qn.Status.Conditions, qnv1alpha1.ConditionPolicyCompliant), findCondition(status.Conditions, qnv1alpha1.ConditionPolicyCompliant))
	return result, r.afterStatus(ctx, updated, heal)
}

// afterStatus runs self-healing's effects once the status that records
// them is stored.
func (r *Reconciler) afterStatus(ctx context.Context, qn *qnv1alpha1.QuantumNode, h *heal) error {
	for _, f := range h.after {
		if err := f(ctx, qn); err != nil {
			return err
		}
	}
	return nil
}

// ensureService creates or restores the QuantumNode's Service and returns it
// as it now is; nil when it does not exist and cannot be created (the
// status says why). A Service of that name the QuantumNode does not control
// is returned untouched.
func (r *Reconciler) ensureService(ctx context.Context, qn *qnv1alpha1.QuantumNode) (*corev1.Service, error) {
	if reason, _ := serviceProblem(qn); reason != "" {
		return nil, nil
	}
	key := client.ObjectKey{Namespace: qn.Namespace, Name: qn.Name}
	svc := &corev1.Service{}
	err := r.Client.Get(ctx, key, svc)
	switch {
	case apierrors.IsNotFound(err):
		svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: qn.Namespace, Name: qn.Name}}
		shapeService(qn, svc)
		if err := controllerutil.SetControllerReference(qn, svc, r.Scheme); err != nil {
			return nil, fmt.Errorf("own Service %s: %w", key, err)
		}
		if err := r.Client.Create(ctx, svc, client.FieldOwner(managerName)); err != nil {
			// AlreadyExists means the cache lags behind; the retry sees it.
			return nil, fmt.Errorf("create Service %s: %w", key, err)
		}
		r.Recorder.Eventf(qn, svc, corev1.EventTypeNormal, qnv1alpha1.EventServiceCreated, "CreateService",
			"created Service %s exposing %s", svc.Name, portList(qn))
		return svc, nil
	case err != nil:
		return nil, fmt.Errorf("read Service %s: %w", key, err)
	case !metav1.IsControlledBy(svc, qn):
		return svc, nil
	case serviceMatches(qn, svc):
		return svc, nil
	}
	svc = svc.DeepCopy() // the cache's copy is shared
	shapeService(qn, svc)
	if err := r.Client.Update(ctx, svc, client.FieldOwner(managerName)); err != nil {
		return nil, fmt.Errorf("restore Service %s to spec.services: %w", key, err)
	}
	r.Recorder.Eventf(qn, svc, corev1.EventTypeNormal, qnv1alpha1.EventServiceUpdated, "UpdateService",
		"brought Service %s back to %s", svc.Name, portList(qn))
	return svc, nil
}

// findNode returns the Node the QuantumNode runs on, or nil when there is
// none: the Node named by spec.nodeName, else the one labelled
// qn.dev/node=<name>.
func (r *Reconciler) findNode(ctx context.Context, qn *qnv1alpha1.QuantumNode) (*corev1.Node, error) {
	if node, err := r.boundNode(ctx, qn); node != nil || err != nil {
		return node, err
	}
	if qn.Spec.NodeName != "" {
		return r.getNode(ctx, qn.Spec.NodeName)
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes, client.MatchingFields{nodeLabelIndex: qn.Name}); err != nil {
		return nil, fmt.Errorf("list Nodes labelled %s=%s: %w", qnv1alpha1.NodeLabel, qn.Name, err)
	}
	switch len(nodes.Items) {
	case 0:
		return nil, nil
	case 1:
		return &nodes.Items[0], nil
	}
	// Several: pick one the same way every time, so the status does not
	// flap between them, and say so where the owner will look.
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	names := make([]string, len(nodes.Items))
	for i := range nodes.Items {
		names[i] = nodes.Items[i].Name
	}
	r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventAmbiguousNode, "MatchNode",
		"Nodes %s all carry %s=%s; using %s. Label only one, or set spec.nodeName",
		strings.Join(names, ", "), qnv1alpha1.NodeLabel, qn.Name, names[0])
	return &nodes.Items[0], nil
}

// boundNode is the Node a Reschedule moved qn to (status.binding), or nil
// when there is none or it no longer holds: the binding holds while the
// spec still names the Node it named then and, for a node bound by label,
// while no third Node carries the label (the label may still be on its
// way from the old Node to the new one).
func (r *Reconciler) boundNode(ctx context.Context, qn *qnv1alpha1.QuantumNode) (*corev1.Node, error) {
	b := qn.Status.Binding
	if b == nil || b.SpecNodeName != qn.Spec.NodeName {
		return nil, nil
	}
	if b.SpecNodeName == "" {
		nodes := &corev1.NodeList{}
		if err := r.Client.List(ctx, nodes, client.MatchingFields{nodeLabelIndex: qn.Name}); err != nil {
			return nil, fmt.Errorf("list Nodes labelled %s=%s: %w", qnv1alpha1.NodeLabel, qn.Name, err)
		}
		for _, n := range nodes.Items {
			if n.Name != b.NodeName && n.Name != b.PreviousNodeName {
				return nil, nil
			}
		}
	}
	return r.getNode(ctx, b.NodeName)
}

// getNode reads a Node from the cache; nil when it does not exist.
func (r *Reconciler) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read Node %s: %w", name, err)
	}
	return node, nil
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

// recordCompliance emits a Warning event when the audit finds a node newly
// non-compliant (after the status write, so event and status agree), and a
// Normal one when it complies again.
func (r *Reconciler) recordCompliance(qn *qnv1alpha1.QuantumNode, before, after *metav1.Condition) {
	if after == nil || (before != nil && before.Status == after.Status && before.Reason == after.Reason) {
		return
	}
	switch {
	case after.Status == metav1.ConditionFalse:
		r.Recorder.Eventf(qn, nil, corev1.EventTypeWarning, after.Reason, "AuditPolicies", "%s", after.Message)
	case before != nil && before.Status == metav1.ConditionFalse && after.Status == metav1.ConditionTrue:
		r.Recorder.Eventf(qn, nil, corev1.EventTypeNormal, after.Reason, "AuditPolicies", "%s", after.Message)
	}
}

func readyCondition(status qnv1alpha1.QuantumNodeStatus) metav1.Condition {
	for _, c := range status.Conditions {
		if c.Type == qnv1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

func readyReason(status qnv1alpha1.QuantumNodeStatus) string {
	return readyCondition(status).Reason
}
