package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
)

// Options tune the background audit's sweeps and reports.
type Options struct {
	// Interval re-audits every node periodically; 0 only on policy changes
	// and node changes.
	Interval time.Duration
	// Rate is how many nodes per second a sweep queues (a policy change
	// re-audits every node: 10,000 nodes must not stampede the apiserver
	// with status writes). 0 means 50.
	Rate float64
	// PollInterval is how often the served policy revision is compared
	// with the last one audited; 0 means 1s.
	PollInterval time.Duration
	// Reports keeps a wgpolicyk8s.io/v1alpha2 PolicyReport per namespace
	// (when the cluster serves the kind).
	Reports bool
}

// setupSweeps adds the sweeper (and the report controller) to the manager
// and returns the source through which the sweeper queues nodes for the
// quantumnode controller.
func setupSweeps(mgr ctrl.Manager, engine *policies.Engine, o Options, m *metrics) (source.Source, error) {
	if o.Rate <= 0 {
		o.Rate = 50
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	nodes := make(chan event.GenericEvent)
	s := &sweeper{opts: o, engine: engine, reader: mgr.GetCache(), nodes: nodes, metrics: m, logger: mgr.GetLogger().WithName("audit")}
	if o.Reports {
		_, err := mgr.GetRESTMapper().RESTMapping(PolicyReportGVK.GroupKind(), PolicyReportGVK.Version)
		switch {
		case meta.IsNoMatchError(err):
			s.logger.Info("the cluster does not serve " + PolicyReportGVK.GroupVersion().String() + " PolicyReport; no reports are written (install the CRD and restart)")
		case err != nil:
			return nil, fmt.Errorf("look up %s: %w", PolicyReportGVK, err)
		default:
			namespaces := make(chan event.GenericEvent)
			s.namespaces = namespaces
			if err := setupReports(mgr, engine, namespaces); err != nil {
				return nil, err
			}
		}
	}
	if err := mgr.Add(s); err != nil {
		return nil, fmt.Errorf("add the audit sweeper: %w", err)
	}
	return source.Channel(nodes, &handler.EnqueueRequestForObject{}), nil
}

// sweeper queues every QuantumNode for a new audit when the served policy
// revision changes and every Interval, at Rate nodes per second. The audit
// itself reads only the cache; what the rate bounds is the status writes
// and events that follow. It runs on the leader only (a manager Runnable).
type sweeper struct {
	opts       Options
	engine     *policies.Engine
	reader     client.Reader
	nodes      chan<- event.GenericEvent
	namespaces chan<- event.GenericEvent
	metrics    *metrics
	logger     logr.Logger
}

// Start implements manager.Runnable.
func (s *sweeper) Start(ctx context.Context) error {
	// Every node is reconciled, and so audited, when the cache first
	// lists it; sweeps are for what changes afterwards.
	audited := s.engine.Current().Revision
	poll := time.NewTicker(s.opts.PollInterval)
	defer poll.Stop()
	var periodic <-chan time.Time
	if s.opts.Interval > 0 {
		t := time.NewTicker(s.opts.Interval)
		defer t.Stop()
		periodic = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
			rev := s.engine.Current().Revision
			if rev == audited {
				continue
			}
			s.logger.Info("policy revision changed; re-auditing every QuantumNode", "from", audited, "to", rev, "rate", s.opts.Rate)
			audited = rev
			s.sweep(ctx)
		case <-periodic:
			s.logger.V(1).Info("periodic re-audit of every QuantumNode")
			s.sweep(ctx)
		}
	}
}

func (s *sweeper) sweep(ctx context.Context) {
	start := time.Now()
	list := &qnv1alpha1.QuantumNodeList{}
	if err := s.reader.List(ctx, list); err != nil {
		s.logger.Error(err, "list QuantumNodes for the audit sweep")
		return
	}
	if s.namespaces != nil {
		seen := map[string]bool{}
		for i := range list.Items {
			ns := list.Items[i].Namespace
			if !seen[ns] {
				seen[ns] = true
				if !send(ctx, s.namespaces, namespaceObject(ns)) {
					return
				}
			}
		}
	}
	limiter := flowcontrol.NewTokenBucketRateLimiter(float32(s.opts.Rate), max(1, int(s.opts.Rate)))
	for i := range list.Items {
		if err := limiter.Wait(ctx); err != nil {
			return
		}
		if !send(ctx, s.nodes, &list.Items[i]) {
			return
		}
	}
	s.metrics.swept(start, time.Now())
	s.logger.Info("audit sweep queued every QuantumNode", "nodes", len(list.Items), "took", time.Since(start).Round(time.Millisecond).String())
}

func send(ctx context.Context, ch chan<- event.GenericEvent, obj client.Object) bool {
	select {
	case ch <- event.GenericEvent{Object: obj}:
		return true
	case <-ctx.Done():
		return false
	}
}
