package selfheal

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/controller/health"
	"github.com/quantumnode/qn-admission/controller/remediation"
)

// Options are what New needs from the QuantumNode reconciler.
type Options struct {
	// Client reads from the manager's cache and writes to the API server.
	Client   client.Client
	Recorder events.EventRecorder
	// Clock paces the censuses of the guards' books.
	Clock clock.PassiveClock
	// Metrics receives self-healing's series.
	Metrics prometheus.Registerer
	// ProbeWorkers bounds the active health checks running at once; 0
	// means 16.
	ProbeWorkers int
}

// New registers what health and remediation need: the indexes, the
// prober, the guards' books, the effects, the metrics and the controller
// of the policies' status. It returns the step the QuantumNode reconcile
// runs.
func New(ctx context.Context, mgr ctrl.Manager, o Options) (*Step, error) {
	indexer := mgr.GetFieldIndexer()
	if err := indexer.IndexField(ctx, &discoveryv1.EndpointSlice{}, endpointSliceIndex, endpointSliceServiceOf); err != nil {
		return nil, fmt.Errorf("index EndpointSlices by their Service: %w", err)
	}
	if err := indexer.IndexField(ctx, &qnv1alpha1.QuantumNode{}, remediation.InFlightIndex, remediation.InFlightOf); err != nil {
		return nil, fmt.Errorf("index QuantumNodes by a remediation in flight: %w", err)
	}
	if err := indexer.IndexField(ctx, &corev1.Pod{}, controller.QuantumNodeLabelIndex, controller.QuantumNodeLabelOf); err != nil {
		return nil, fmt.Errorf("index %T by label %s: %w", &corev1.Pod{}, qnv1alpha1.LabelQuantumNode, err)
	}
	m, err := newMetrics(o.Metrics, mgr.GetCache())
	if err != nil {
		return nil, err
	}
	s := &Step{client: o.Client, recorder: o.Recorder, metrics: m}
	results := make(chan event.GenericEvent, 1024)
	s.prober = health.NewProber(func(key types.NamespacedName) {
		qn := &qnv1alpha1.QuantumNode{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		select {
		case results <- event.GenericEvent{Object: qn}:
		case <-ctx.Done():
		}
	})
	s.prober.Workers = o.ProbeWorkers
	if err := mgr.Add(s.prober); err != nil {
		return nil, fmt.Errorf("add the health prober: %w", err)
	}
	s.books = remediation.NewBooks(mgr.GetCache())
	s.books.Clock = o.Clock
	s.effects = &remediation.Effects{Client: o.Client, FieldManager: controller.ManagerName}
	ps := &policyStatus{client: o.Client, books: s.books, metrics: m, recorder: o.Recorder, clock: o.Clock}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("quantumnodehealthpolicy").
		For(&qnv1alpha1.QuantumNodeHealthPolicy{}).
		Watches(&qnv1alpha1.QuantumNode{}, everyPolicy(o.Client), builder.WithPredicates(healthCounted())).
		Complete(ps)
	if err != nil {
		return nil, fmt.Errorf("build the quantumnodehealthpolicy controller: %w", err)
	}
	s.results = source.Channel(results, &handler.EnqueueRequestForObject{})
	return s, nil
}

// Watch has the QuantumNode controller hear what health reads: the
// EndpointSlices of a node's Service, its health policies, and the
// prober's results.
func (s *Step) Watch(b *builder.Builder) *builder.Builder {
	return b.
		Watches(&discoveryv1.EndpointSlice{}, endpointSliceHandler(s.client)).
		Watches(&qnv1alpha1.QuantumNodeHealthPolicy{}, healthPolicyHandler(s.client), builder.WithPredicates(policyChanged())).
		WatchesRawSource(s.results)
}

// Prober is the step's prober of active checks.
func (s *Step) Prober() *health.Prober { return s.prober }

// Books are the guards' books: the census and the remediations in flight.
func (s *Step) Books() *remediation.Books { return s.books }

// endpointSliceIndex indexes EndpointSlices by the Service they belong to
// (within a namespace), so a node's slices are a cache lookup.
const endpointSliceIndex = "qn.dev/serviceName"

func endpointSliceServiceOf(obj client.Object) []string {
	if name := obj.GetLabels()[discoveryv1.LabelServiceName]; name != "" {
		return []string{name}
	}
	return nil
}

// endpointSliceHandler maps an EndpointSlice to the QuantumNode whose
// Service it belongs to (label kubernetes.io/service-name), when one of
// that name exists in its namespace.
func endpointSliceHandler(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, slice client.Object) []reconcile.Request {
		name := slice.GetLabels()[discoveryv1.LabelServiceName]
		if name == "" {
			return nil
		}
		key := client.ObjectKey{Namespace: slice.GetNamespace(), Name: name}
		if err := c.Get(ctx, key, &qnv1alpha1.QuantumNode{}); err != nil {
			return nil // not a QuantumNode's Service (or the cache stops)
		}
		return []reconcile.Request{{NamespacedName: key}}
	})
}

// healthPolicyHandler maps a policy change to every QuantumNode it may
// concern: those its selector matches now, and those judged by any policy
// (a narrowed selector releases nodes, which then drop their health). A
// rare event, so one pass over the cache is fine.
func healthPolicyHandler(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		p, ok := obj.(*qnv1alpha1.QuantumNodeHealthPolicy)
		if !ok {
			return nil
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.Selector)
		if err != nil {
			sel = labels.Nothing()
		}
		list := &qnv1alpha1.QuantumNodeList{}
		if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "list QuantumNodes for a health policy event", "policy", p.Name)
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			qn := &list.Items[i]
			if qn.Status.Health != "" || sel.Matches(labels.Set(qn.Labels)) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(qn)})
			}
		}
		return reqs
	})
}

// policyChanged lets through policy changes that can change a node's
// health or its ladder: the spec (generation), annotations (the pause) and
// deletion. The policy's own status, rewritten with every census, is not
// one: it would requeue every node the policy selects each time.
func policyChanged() predicate.Predicate {
	return predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{})
}
