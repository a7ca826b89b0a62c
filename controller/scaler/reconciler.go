package scaler

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// errTargetChanged: the target's /scale changed between the poll's read
// and its write (a conflict); the scaler decides again at once.
var errTargetChanged = errors.New("the target changed between the read and the write of its scale")

// FieldManager names qn-controller in managedFields and events.
const FieldManager = "qn-controller"

// Reconciler polls each HorizontalQNScaler at its interval: one instant
// query (plus the abort conditions of a stage in progress), one read of the
// target's /scale, at most one write to it, and a status write only when
// something a reader acts on changed (or StatusRefresh has passed).
//
// It is a controller of its own, with its own workers, and every query has
// a deadline and a per-server cap on queries in flight (Prometheus), so a
// slow Prometheus delays only the scalers that query it, and never the
// QuantumNode reconciles.
type Reconciler struct {
	// Client reads scalers, HPAs and ScaledObjects from the cache and writes
	// status. Give it its own rate limiter (a client of its own) so that
	// scalers do not take the QuantumNode reconciler's API budget.
	Client client.Client
	// APIReader reads Secrets of authSecretRef directly (they are not
	// cached: the controller watches no Secrets).
	APIReader client.Reader
	// Scales reads and writes /scale; Mapper resolves scaleTargetRef;
	// ScaleKinds says whether a resource serves /scale. All default to
	// discovery-backed ones from the manager.
	Scales     scale.ScalesGetter
	Mapper     meta.RESTMapper
	ScaleKinds scale.ScaleKindResolver
	// Recorder emits events on the scaler.
	Recorder events.EventRecorder
	// Clock is the time of decisions; injected so tests can fix it.
	Clock clock.PassiveClock
	// Prometheus runs the queries.
	Prometheus *Prometheus
	// DefaultServer is --prometheus-url, for scalers without serverAddress.
	DefaultServer string
	// Metrics receives the per-scaler series; nil means the manager's
	// registry, which serves /metrics.
	Metrics prometheus.Registerer
	// MaxConcurrentReconciles bounds the scalers polled at once; keep it
	// above Prometheus.MaxInFlightPerServer so one slow server cannot hold
	// every worker.
	MaxConcurrentReconciles int
	// StatusRefresh is how stale status.currentValue (and the wording of a
	// hold) may grow before it is written anyway; changes of replicas,
	// conditions, stages and the scaler's memory are written at once.
	StatusRefresh time.Duration
	// BusyRetry is when a scaler whose server had no free query slot tries
	// again at the latest; it is woken sooner when a slot is its.
	BusyRetry time.Duration
	// KEDARecheck is how often, while the cluster serves no KEDA
	// ScaledObjects, the controller looks again, so that KEDA installed
	// after qn-controller started is seen without a restart (default
	// 30 s; one discovery request each time).
	KEDARecheck time.Duration

	metrics *metrics
	// scaledObjects reads KEDA's ScaledObjects from the manager's cache,
	// where their target index lives; nil when the cluster serves none.
	// (A client reads unstructured objects from the API server, which
	// knows no such index.) Set once, at start or when KEDA appears.
	scaledObjects atomic.Pointer[cacheReader]
	polls         pollTimes
	written       statusWrites
	unsaved       unsavedStatuses
	secrets       *secretCache
}

// Everything the scaler does, for config/rbac/role.yaml (`make rbac`): the
// scale of the apps group's kinds (Deployment, StatefulSet, ReplicaSet);
// the chart's controller.scaler.scaleGroups adds other groups (a custom
// resource's), always */scale only. Secrets are read one by one (get,
// never list), those authSecretRef names.
// +kubebuilder:rbac:groups=qn.dev,resources=horizontalqnscalers,verbs=get;list;watch
// +kubebuilder:rbac:groups=qn.dev,resources=horizontalqnscalers/status,verbs=update;patch
// +kubebuilder:rbac:groups=apps,resources=*/scale,verbs=get;update
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// SetupWithManager fills the zero fields from the manager, registers the
// target indexes and the metrics, and starts the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Mapper == nil {
		r.Mapper = mgr.GetRESTMapper()
	}
	if r.Scales == nil || r.ScaleKinds == nil {
		scales, kinds, err := ScalesFor(mgr.GetConfig(), r.Mapper)
		if err != nil {
			return err
		}
		if r.Scales == nil {
			r.Scales = scales
		}
		if r.ScaleKinds == nil {
			r.ScaleKinds = kinds
		}
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(FieldManager)
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Prometheus == nil {
		r.Prometheus = NewPrometheus(5*time.Second, 4)
	}
	if r.Metrics == nil {
		r.Metrics = ctrlmetrics.Registry
	}
	if r.StatusRefresh <= 0 {
		r.StatusRefresh = time.Minute
	}
	if r.BusyRetry <= 0 {
		r.BusyRetry = time.Second
	}
	r.secrets = &secretCache{reader: r.APIReader, ttl: 30 * time.Second, entries: map[types.NamespacedName]secretEntry{}}
	var err error
	if r.metrics, err = newMetrics(r.Metrics); err != nil {
		return fmt.Errorf("register the scaler metrics: %w", err)
	}
	indexer := mgr.GetFieldIndexer()
	if err := indexer.IndexField(ctx, &qnv1alpha1.HorizontalQNScaler{}, scaleTargetIndex, scalerTargetKey); err != nil {
		return fmt.Errorf("index HorizontalQNScalers by target: %w", err)
	}
	if err := indexer.IndexField(ctx, &autoscalingv2.HorizontalPodAutoscaler{}, scaleTargetIndex, hpaTargetKey); err != nil {
		return fmt.Errorf("index HorizontalPodAutoscalers by target: %w", err)
	}
	// KEDA is optional: its ScaledObjects are watched when the cluster
	// serves them, at start or once KEDA is installed.
	served, err := r.watchScaledObjects(ctx, mgr)
	if err != nil {
		return err
	}
	if !served {
		if r.KEDARecheck <= 0 {
			r.KEDARecheck = 30 * time.Second
		}
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			r.awaitKEDA(ctx, mgr)
			return nil
		})); err != nil {
			return fmt.Errorf("add the watch for KEDA's ScaledObjects: %w", err)
		}
	}
	// A scaler waiting for a busy Prometheus is woken when a slot is its.
	wakeups := make(chan event.GenericEvent, 1024)
	r.Prometheus.Wake = func(key string) {
		ns, name, _ := strings.Cut(key, "/")
		select {
		case wakeups <- event.GenericEvent{Object: &qnv1alpha1.HorizontalQNScaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}:
		default: // full: the waiter's own retry comes within BusyRetry
		}
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("horizontalqnscaler").
		WatchesRawSource(source.Channel(wakeups, &handler.EnqueueRequestForObject{})).
		// Status writes do not wake a scaler (it polls); spec and pause
		// annotation changes do.
		For(&qnv1alpha1.HorizontalQNScaler{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("build the horizontalqnscaler controller: %w", err)
	}
	return nil
}

// cacheReader is the manager's cache, as the reader of ScaledObjects.
type cacheReader struct{ client.Reader }

// watchScaledObjects watches and indexes KEDA's ScaledObjects if the
// cluster serves them; served says whether it does.
func (r *Reconciler) watchScaledObjects(ctx context.Context, mgr ctrl.Manager) (served bool, err error) {
	if _, err := r.Mapper.RESTMapping(ScaledObjectGVK.GroupKind(), ScaledObjectGVK.Version); err != nil {
		return false, nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ScaledObjectGVK)
	if err := mgr.GetFieldIndexer().IndexField(ctx, u, scaleTargetIndex, scaledObjectTargetKey); err != nil {
		return true, fmt.Errorf("index KEDA ScaledObjects by target: %w", err)
	}
	r.scaledObjects.Store(&cacheReader{mgr.GetCache()})
	return true, nil
}

// awaitKEDA looks for ScaledObjects every KEDARecheck until the cluster
// serves them, then watches them: from then on a ScaledObject of a
// scaler's target is a conflict, as for KEDA installed before.
func (r *Reconciler) awaitKEDA(ctx context.Context, mgr ctrl.Manager) {
	logger := log.FromContext(ctx).WithName("horizontalqnscaler")
	tick := time.NewTicker(r.KEDARecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		served, err := r.watchScaledObjects(ctx, mgr)
		switch {
		case err != nil:
			logger.Error(err, "KEDA's ScaledObjects are served, but cannot be watched yet; trying again", "in", r.KEDARecheck)
		case served:
			logger.Info("KEDA's ScaledObjects are served now: a ScaledObject of a scaler's target is reported as a conflict")
			return
		}
	}
}

// ScalesFor builds the /scale client and the resolver of scale kinds:
// discovery says which resources serve /scale and in which version, the
// REST mapper which resource a kind is, as for the HorizontalPodAutoscaler
// controller.
func ScalesFor(cfg *rest.Config, mapper meta.RESTMapper) (scale.ScalesGetter, scale.ScaleKindResolver, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("build the discovery client for /scale: %w", err)
	}
	kinds := scale.NewDiscoveryScaleKindResolver(dc)
	scales, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, kinds)
	if err != nil {
		return nil, nil, fmt.Errorf("build the /scale client: %w", err)
	}
	return scales, kinds, nil
}

// Reconcile polls one scaler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s, err := r.read(ctx, req.NamespacedName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.forget(req.NamespacedName)
			r.polls.forget(req.NamespacedName)
			r.written.forget(req.NamespacedName)
			r.unsaved.forget(req.NamespacedName)
			r.Prometheus.Forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	spec := WithDefaults(&s.Spec)
	interval := PollingInterval(spec)
	now := r.Clock.Now()
	// A spec or pause change polls at once; anything else waits for the
	// interval, so extra events never add queries.
	if wait := r.polls.wait(req.NamespacedName, s, now, interval); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	res, err := r.poll(ctx, s, spec, now)
	switch {
	case errors.Is(err, ErrServerBusy):
		return ctrl.Result{RequeueAfter: r.BusyRetry}, nil
	case errors.Is(err, errTargetChanged):
		// Not a poll: decide again shortly on what the target holds now.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	next := r.polls.mark(req.NamespacedName, s, now, interval)
	if err != nil {
		r.metrics.errors.WithLabelValues(req.Namespace, req.Name).Inc()
		return ctrl.Result{}, err
	}
	if res.RequeueAfter == 0 {
		res.RequeueAfter = max(next.Sub(r.Clock.Now()), 10*time.Millisecond)
	}
	return res, nil
}

// read returns the scaler from the cache, or from the API server while the
// cache has not shown this controller's last status write of it: the
// status is the scaler's memory, and a poll deciding on an older one would
// scale up again inside the cooldown the last poll started.
func (r *Reconciler) read(ctx context.Context, key types.NamespacedName) (*qnv1alpha1.HorizontalQNScaler, error) {
	s := &qnv1alpha1.HorizontalQNScaler{}
	if err := r.Client.Get(ctx, key, s); err != nil {
		return nil, err
	}
	rv, wrote := r.written.get(key)
	if !wrote || s.ResourceVersion == rv {
		r.written.forget(key)
		return s, nil
	}
	fresh := &qnv1alpha1.HorizontalQNScaler{}
	if err := r.APIReader.Get(ctx, key, fresh); err != nil {
		return nil, err
	}
	// The version the cache must reach before it is trusted again (newer
	// than the write when someone changed the scaler since).
	r.written.wrote(key, fresh.ResourceVersion)
	return fresh, nil
}

// poll reads, decides, writes and records one scaler.
func (r *Reconciler) poll(ctx context.Context, s *qnv1alpha1.HorizontalQNScaler, spec *qnv1alpha1.HorizontalQNScalerSpec, now time.Time) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	key := client.ObjectKeyFromObject(s)
	// What the scaler remembers (its last scale, the cooldowns' start) is
	// its status, or the status a poll of this controller decided but
	// could not write, until that is written.
	prev := &s.Status
	if unsaved := r.unsaved.since(key, s); unsaved != nil {
		prev = unsaved
	}
	status := prev.DeepCopy()
	status.ObservedGeneration = s.Generation
	at := metav1.NewTime(now)

	// The query first: a Prometheus with no free slot costs no API call.
	in := Input{Spec: spec, Status: prev, Now: now, Paused: s.Paused()}
	if !in.Paused {
		server, err := r.server(ctx, s.Namespace, spec.QNMetric)
		if err != nil {
			in.Metric = Reading{Err: err}
			r.metrics.queryErrors.WithLabelValues(s.Namespace, s.Name, string(KindOf(err))).Inc()
		} else {
			release, err := r.Prometheus.Acquire(server.URL, key.String())
			if err != nil {
				return ctrl.Result{}, err
			}
			in.Metric = r.query(ctx, key, server, spec.QNMetric.Query)
			for _, c := range StageConditions(spec, prev) {
				in.Abort = append(in.Abort, ConditionReading{Condition: c, Reading: r.query(ctx, key, server, c.Query)})
			}
			release()
		}
	}

	tgt, err := resolveTarget(r.Mapper, r.ScaleKinds, spec.ScaleTargetRef)
	var current *autoscalingv1.Scale
	if err == nil {
		current, err = getScale(ctx, r.Scales, s.Namespace, tgt)
	}
	var te *targetError
	if errors.As(err, &te) {
		// Nothing to decide for: say why, and look again next poll.
		r.setCondition(status, qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, te.reason, te.msg, at)
		r.setCondition(status, qnv1alpha1.ScalerScalingActive, metav1.ConditionFalse, te.reason, "the target's scale cannot be read: nothing is decided", at)
		status.Stage = nil
		if wErr := r.writeStatus(ctx, s, status, now); wErr != nil {
			return ctrl.Result{}, wErr
		}
		if te.transient {
			return ctrl.Result{}, te
		}
		logger.V(1).Info("scale target unavailable", "reason", te.reason, "message", te.msg)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	replicas := current.Spec.Replicas

	others, err := r.conflicts(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}

	in.Replicas = replicas
	d := Decide(in)

	// Carry the decision out.
	wantWrite := d.Write(replicas)
	memory, after := d.Next, replicas
	blocked := ""
	switch {
	case !wantWrite:
	case len(others) > 0:
		memory, blocked = d.Observed, "not written: another scaler owns the target; "
	case spec.DryRun:
		memory, blocked = d.Observed, "dry run, not written: "
	}
	var writeErr error
	if wantWrite && blocked == "" {
		if writeErr = updateScale(ctx, r.Scales, s.Namespace, tgt, current, d.Replicas); apierrors.IsConflict(writeErr) {
			// The target changed between read and write (its controller
			// wrote its status): nothing happened worth a condition.
			return ctrl.Result{}, errTargetChanged
		}
		if writeErr != nil {
			memory = d.Observed
			blocked = "the write failed: "
		} else {
			after = d.Replicas
		}
	}

	status.CurrentReplicas = after
	status.DesiredReplicas = d.Replicas
	status.LastScaleTime, status.LastScaleUpTime, status.BelowLowerSince = memory.LastScaleTime, memory.LastScaleUpTime, memory.BelowLowerSince
	status.MetricFailures, status.Stage = memory.MetricFailures, memory.Stage
	if !in.Paused {
		status.CurrentValue = in.Metric.Text
	}
	status.LastDecision = &qnv1alpha1.ScalerDecision{
		Time: at, Value: in.Metric.Text, Upper: spec.Thresholds.Upper, Lower: spec.Thresholds.Lower,
		Action: d.Action, FromReplicas: replicas, ToReplicas: d.Replicas, Reason: blocked + d.Reason,
	}
	r.setConditions(status, s, spec, in, d, others, writeErr, at)
	if err := r.writeStatus(ctx, s, status, now); err != nil {
		return ctrl.Result{}, err
	}
	r.record(s, spec, in, d, replicas, after, others, writeErr)
	r.observe(key, spec, in, d)
	if writeErr != nil {
		return ctrl.Result{}, fmt.Errorf("write the scale of %s: %w", tgt.describe, writeErr)
	}
	if after != replicas {
		logger.Info("scaled", "target", tgt.describe, "from", replicas, "to", after, "reason", d.Reason)
	}
	return ctrl.Result{}, nil
}

// query runs one instant query and records its duration and failure.
func (r *Reconciler) query(ctx context.Context, key types.NamespacedName, server Server, q string) Reading {
	start := time.Now()
	reading := r.Prometheus.Query(ctx, server, q)
	r.metrics.queryDuration.WithLabelValues(key.Namespace, key.Name).Observe(time.Since(start).Seconds())
	if reading.Err != nil {
		r.metrics.queryErrors.WithLabelValues(key.Namespace, key.Name, string(KindOf(reading.Err))).Inc()
	}
	return reading
}

// server resolves where a scaler's queries go and with which credentials.
func (r *Reconciler) server(ctx context.Context, namespace string, m qnv1alpha1.QNMetric) (Server, error) {
	srv := Server{URL: m.ServerAddress}
	if srv.URL == "" {
		srv.URL = r.DefaultServer
	}
	if srv.URL == "" {
		return srv, &QueryError{Kind: QueryUnreachable, Msg: "qnMetric.serverAddress is empty and qn-controller runs without --prometheus-url: set one of them"}
	}
	if ref := m.AuthSecretRef; ref != nil {
		data, err := r.secrets.get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name})
		if err != nil {
			return srv, &QueryError{Kind: QueryAuthUnreadable, Msg: err.Error()}
		}
		tokenKey, caKey := ref.TokenKey, ref.CAKey
		if tokenKey == "" {
			tokenKey = "token"
		}
		if caKey == "" {
			caKey = "ca.crt"
		}
		srv.Token, srv.CA = string(data[tokenKey]), data[caKey]
	}
	return srv, nil
}

func (r *Reconciler) setCondition(status *qnv1alpha1.HorizontalQNScalerStatus, typ string, st metav1.ConditionStatus, reason, msg string, at metav1.Time) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg,
		ObservedGeneration: status.ObservedGeneration, LastTransitionTime: at})
}

// setConditions writes the four conditions of one poll.
func (r *Reconciler) setConditions(status *qnv1alpha1.HorizontalQNScalerStatus, s *qnv1alpha1.HorizontalQNScaler, spec *qnv1alpha1.HorizontalQNScalerSpec,
	in Input, d Decision, others []string, writeErr error, at metav1.Time) {
	ref := spec.ScaleTargetRef
	switch {
	case len(others) > 0:
		r.setCondition(status, qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, qnv1alpha1.ScalerReasonConflictingScaler, conflictMessage(s, others), at)
	case writeErr != nil:
		r.setCondition(status, qnv1alpha1.ScalerAbleToScale, metav1.ConditionFalse, qnv1alpha1.ScalerReasonFailedUpdateScale, fmt.Sprintf("write the scale of %s %s: %v", ref.Kind, ref.Name, writeErr), at)
	case spec.DryRun:
		r.setCondition(status, qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonDryRun, fmt.Sprintf("dry run: decisions are reported, never written to %s %s", ref.Kind, ref.Name), at)
	default:
		r.setCondition(status, qnv1alpha1.ScalerAbleToScale, metav1.ConditionTrue, qnv1alpha1.ScalerReasonReadyForNewScale, fmt.Sprintf("the scale of %s %s can be read and written", ref.Kind, ref.Name), at)
	}
	switch {
	case d.Disabled != "":
		r.setCondition(status, qnv1alpha1.ScalerScalingActive, metav1.ConditionFalse, d.Disabled, d.Reason, at)
	case d.Action == qnv1alpha1.ActionFallback:
		r.setCondition(status, qnv1alpha1.ScalerScalingActive, metav1.ConditionFalse, qnv1alpha1.ScalerReasonFallbackApplied,
			fmt.Sprintf("the %s cannot be read: the target is held at the fallback's %d replicas", MetricNoun(spec), spec.Fallback.Replicas), at)
	case in.Metric.Err != nil:
		r.setCondition(status, qnv1alpha1.ScalerScalingActive, metav1.ConditionFalse, qnv1alpha1.ScalerReasonFailedGetMetric, "the "+MetricNoun(spec)+" cannot be read: the scaler holds the replicas (see MetricAvailable)", at)
	default:
		r.setCondition(status, qnv1alpha1.ScalerScalingActive, metav1.ConditionTrue, qnv1alpha1.ScalerReasonValidMetricFound, "the query returns a value the rule decides on", at)
	}
	switch {
	case d.Limit != LimitNone:
		r.setCondition(status, qnv1alpha1.ScalerScalingLimited, metav1.ConditionTrue, string(d.Limit), d.LimitMessage, at)
	case d.Disabled == "" && in.Metric.Err == nil:
		r.setCondition(status, qnv1alpha1.ScalerScalingLimited, metav1.ConditionFalse, qnv1alpha1.ScalerReasonDesiredWithinRange, "the rule's replicas lie within minReplicas and maxReplicas", at)
	}
	switch {
	case in.Paused:
		r.setCondition(status, qnv1alpha1.ScalerMetricAvailable, metav1.ConditionUnknown, qnv1alpha1.ScalerReasonNotQueried, "paused: the query does not run", at)
	case in.Metric.Err != nil:
		r.setCondition(status, qnv1alpha1.ScalerMetricAvailable, metav1.ConditionFalse, string(KindOf(in.Metric.Err)), namedMessage(spec, in.Metric.Err.Error()), at)
	default:
		r.setCondition(status, qnv1alpha1.ScalerMetricAvailable, metav1.ConditionTrue, qnv1alpha1.ScalerReasonQuerySucceeded, namedMessage(spec, "the query returns one sample"), at)
	}
}

// namedMessage prefixes a message about the metric with qnMetric.name,
// when the scaler names its figure.
func namedMessage(spec *qnv1alpha1.HorizontalQNScalerSpec, msg string) string {
	if spec.QNMetric.Name == "" {
		return msg
	}
	return spec.QNMetric.Name + ": " + msg
}

// writeStatus writes status when something a reader acts on changed, or
// when the stored one is older than StatusRefresh; a value that merely
// moved waits, so 1,000 scalers do not write 1,000 statuses per interval.
func (r *Reconciler) writeStatus(ctx context.Context, s *qnv1alpha1.HorizontalQNScaler, status *qnv1alpha1.HorizontalQNScalerStatus, now time.Time) error {
	r.metrics.setAbleToScale(client.ObjectKeyFromObject(s), meta.FindStatusCondition(status.Conditions, qnv1alpha1.ScalerAbleToScale))
	if equality.Semantic.DeepEqual(&s.Status, status) {
		return nil
	}
	if equality.Semantic.DeepEqual(settled(&s.Status, s.Spec.Fallback), settled(status, s.Spec.Fallback)) {
		if last := s.Status.LastDecision; last != nil && now.Sub(last.Time.Time) < r.StatusRefresh {
			return nil
		}
	}
	key := client.ObjectKeyFromObject(s)
	err := r.patchStatus(ctx, s, status)
	if retriableStatusError(err) {
		// The status is the scaler's memory: the write to the target this
		// poll may have made, whose time the cooldowns count from, must
		// not be lost. On a conflict the scaler changed since this poll
		// read it (a label, an annotation, its spec), and the status, still
		// what this poll observed and did, goes onto the newest version; a
		// moment's failure of the API server is waited out.
		err = retry.OnError(retry.DefaultBackoff, retriableStatusError, func() error {
			latest := &qnv1alpha1.HorizontalQNScaler{}
			if err := r.APIReader.Get(ctx, key, latest); err != nil {
				return err
			}
			return r.patchStatus(ctx, latest, status)
		})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		// Past its retries (the API server down for longer than a
		// moment): the scale this poll may have written stays remembered
		// here, so the next polls keep its cooldown, until a write lands.
		r.unsaved.keep(key, s.UID, status)
		return fmt.Errorf("write status of HorizontalQNScaler %s/%s: %w", s.Namespace, s.Name, err)
	}
	r.unsaved.forget(key)
	return nil
}

// retriableStatusError: a status write worth making again at once.
func retriableStatusError(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err)
}

// patchStatus replaces s's status with status, on the version s is.
func (r *Reconciler) patchStatus(ctx context.Context, s *qnv1alpha1.HorizontalQNScaler, status *qnv1alpha1.HorizontalQNScalerStatus) error {
	updated := s.DeepCopy()
	updated.Status = *status
	patch := client.MergeFromWithOptions(s, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, updated, patch, client.FieldOwner(FieldManager)); err != nil {
		return err
	}
	r.written.wrote(client.ObjectKeyFromObject(s), updated.ResourceVersion)
	return nil
}

// numbers matches the numbers in a reason (values, replicas, seconds, the
// digits of a time).
var numbers = regexp.MustCompile(`[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?`)

// settled is the part of a status whose change is written at once: all
// but the value, the numbers in the decision's reason (its wording counts:
// "within the band" becoming "in the cooldown" is news), the time of the
// decision, and failure counts beyond the fallback's threshold.
func settled(st *qnv1alpha1.HorizontalQNScalerStatus, fallback *qnv1alpha1.Fallback) *qnv1alpha1.HorizontalQNScalerStatus {
	c := st.DeepCopy()
	c.CurrentValue = ""
	if c.LastDecision != nil {
		c.LastDecision.Time, c.LastDecision.Value = metav1.Time{}, ""
		c.LastDecision.Reason = numbers.ReplaceAllString(c.LastDecision.Reason, "#")
	}
	limit := int32(1)
	if fallback != nil {
		limit = max(fallback.FailureThreshold, 1)
	}
	c.MetricFailures = min(c.MetricFailures, limit)
	return c
}

// record emits the events of one poll, after its writes.
func (r *Reconciler) record(s *qnv1alpha1.HorizontalQNScaler, spec *qnv1alpha1.HorizontalQNScalerSpec, in Input, d Decision, before, after int32, others []string, writeErr error) {
	prev := s.Status
	switch {
	case after > before:
		r.metrics.scales.WithLabelValues(s.Namespace, s.Name, "up").Inc()
	case after < before:
		r.metrics.scales.WithLabelValues(s.Namespace, s.Name, "down").Inc()
	}
	wasFallback := prev.LastDecision != nil && prev.LastDecision.Action == qnv1alpha1.ActionFallback
	switch {
	case after != before && d.Action == qnv1alpha1.ActionStageAbort:
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, qnv1alpha1.ScalerEventStageAborted, "Scale", "%s", d.Reason)
	case after != before && d.Action == qnv1alpha1.ActionFallback:
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, qnv1alpha1.ScalerEventFallbackApplied, "Scale", "%s", d.Reason)
	case after > before:
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, qnv1alpha1.ScalerEventScaledUp, "Scale", "%s", d.Reason)
	case after < before:
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, qnv1alpha1.ScalerEventScaledDown, "Scale", "%s", d.Reason)
	case d.Action == qnv1alpha1.ActionFallback && !wasFallback:
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, qnv1alpha1.ScalerEventFallbackApplied, "Scale", "%s", d.Reason)
	}
	if in.Metric.Err != nil && !in.Paused {
		if c := meta.FindStatusCondition(prev.Conditions, qnv1alpha1.ScalerMetricAvailable); c == nil || c.Status != metav1.ConditionFalse {
			r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, qnv1alpha1.ScalerEventMetricUnavailable, "Query", "%s", namedMessage(spec, in.Metric.Err.Error()))
		}
	}
	if len(others) > 0 {
		if c := meta.FindStatusCondition(prev.Conditions, qnv1alpha1.ScalerAbleToScale); c == nil || c.Reason != qnv1alpha1.ScalerReasonConflictingScaler {
			r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, qnv1alpha1.ScalerReasonConflictingScaler, "Scale", "%s", conflictMessage(s, others))
		}
	}
	if writeErr != nil {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, qnv1alpha1.ScalerReasonFailedUpdateScale, "Scale", "write the scale of %s %s: %v", spec.ScaleTargetRef.Kind, spec.ScaleTargetRef.Name, writeErr)
	}
}

// observe updates the scaler's series.
func (r *Reconciler) observe(key types.NamespacedName, spec *qnv1alpha1.HorizontalQNScalerSpec, in Input, d Decision) {
	r.metrics.desired.WithLabelValues(key.Namespace, key.Name).Set(float64(d.Replicas))
	r.metrics.maxReplicas.WithLabelValues(key.Namespace, key.Name).Set(float64(spec.MaxReplicas))
	if in.Paused {
		return
	}
	available := 0.0
	if in.Metric.Err == nil {
		available = 1
		r.metrics.setValue(key, spec.QNMetric.Name, in.Metric.Value)
	}
	r.metrics.metricAvailable.WithLabelValues(key.Namespace, key.Name).Set(available)
}

// pollTimes remembers when each scaler's next poll is due, and at which
// generation and pause state it was polled, so events between polls do
// not add queries. Polls keep their cadence: the next one is due an
// interval after the one before was due, not after it ended, so a query
// that waited for a busy Prometheus does not stretch the period. Pacing
// only: a new leader starts empty and polls every scaler at once.
type pollTimes struct {
	mu   sync.Mutex
	last map[types.NamespacedName]pollMark
}

type pollMark struct {
	next       time.Time
	generation int64
	paused     bool
}

func (p *pollTimes) wait(key types.NamespacedName, s *qnv1alpha1.HorizontalQNScaler, now time.Time, _ time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.last[key]
	if !ok || m.generation != s.Generation || m.paused != s.Paused() {
		return 0
	}
	// A little early is on time: RequeueAfter fires a hair before.
	if left := m.next.Sub(now); left > 50*time.Millisecond {
		return left
	}
	return 0
}

// mark records a poll made at now and returns when the next one is due:
// an interval after this one was due when it came on time (within an
// interval of it), else an interval from now (the first poll, a spec
// change, a scaler far behind).
func (p *pollTimes) mark(key types.NamespacedName, s *qnv1alpha1.HorizontalQNScaler, now time.Time, interval time.Duration) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[types.NamespacedName]pollMark{}
	}
	next := now.Add(interval)
	if m, ok := p.last[key]; ok && m.generation == s.Generation && m.paused == s.Paused() &&
		!now.Before(m.next.Add(-50*time.Millisecond)) && now.Before(m.next.Add(interval)) {
		next = m.next.Add(interval)
	}
	p.last[key] = pollMark{next: next, generation: s.Generation, paused: s.Paused()}
	return next
}

func (p *pollTimes) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
}

// statusWrites remembers, per scaler, the resourceVersion of its last
// status write (or a newer one read since) until the cache shows it.
type statusWrites struct {
	mu sync.Mutex
	rv map[types.NamespacedName]string
}

func (w *statusWrites) wrote(key types.NamespacedName, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rv == nil {
		w.rv = map[types.NamespacedName]string{}
	}
	w.rv[key] = rv
}

func (w *statusWrites) get(key types.NamespacedName) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rv, ok := w.rv[key]
	return rv, ok
}

func (w *statusWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.rv, key)
}

// unsavedStatuses holds, per scaler, the last status a poll decided but
// could not write, its write having failed past the retries. The status is
// the scaler's memory (the time of its last scale, from which the
// cooldowns count): deciding on the stored, older one would scale up again
// inside the cooldown the unwritten poll started. It lives in this
// process only: a controller that restarts, or a leader that changes,
// while the API server refuses status writes has only the stored status.
type unsavedStatuses struct {
	mu sync.Mutex
	m  map[types.NamespacedName]unsavedStatus
}

type unsavedStatus struct {
	uid    types.UID
	status *qnv1alpha1.HorizontalQNScalerStatus
}

func (u *unsavedStatuses) keep(key types.NamespacedName, uid types.UID, status *qnv1alpha1.HorizontalQNScalerStatus) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[types.NamespacedName]unsavedStatus{}
	}
	u.m[key] = unsavedStatus{uid: uid, status: status.DeepCopy()}
}

// since returns the unsaved status of s when it is newer than the one s
// holds (decided after the stored status's last decision), and forgets it
// otherwise: the write landed after all (an error after the commit), or
// someone wrote a newer status, or s is another object of the same name.
func (u *unsavedStatuses) since(key types.NamespacedName, s *qnv1alpha1.HorizontalQNScaler) *qnv1alpha1.HorizontalQNScalerStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	kept, ok := u.m[key]
	if !ok {
		return nil
	}
	stored, decided := s.Status.LastDecision, kept.status.LastDecision
	if kept.uid == s.UID && decided != nil && (stored == nil || stored.Time.Before(&decided.Time)) {
		return kept.status.DeepCopy()
	}
	delete(u.m, key)
	return nil
}

func (u *unsavedStatuses) forget(key types.NamespacedName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, key)
}

// secretCache keeps the Secrets of authSecretRef for a short while, so a
// scaler polled every few seconds does not read its Secret every time.
type secretCache struct {
	reader  client.Reader
	ttl     time.Duration
	mu      sync.Mutex
	entries map[types.NamespacedName]secretEntry
}

type secretEntry struct {
	data    map[string][]byte
	fetched time.Time
}

func (c *secretCache) get(ctx context.Context, key types.NamespacedName) (map[string][]byte, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && time.Since(e.fetched) < c.ttl {
		return e.data, nil
	}
	secret := &corev1.Secret{}
	if err := c.reader.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("read Secret %s of qnMetric.authSecretRef: %w", key, err)
	}
	c.mu.Lock()
	c.entries[key] = secretEntry{data: secret.Data, fetched: time.Now()}
	c.mu.Unlock()
	return secret.Data, nil
}
