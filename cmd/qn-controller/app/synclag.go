package app

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// SyncLeaseName is the Lease every replica writes its heartbeat into and
// reads back through a watch (--strict-max-sync-lag).
const SyncLeaseName = "qn-controller-sync.qn.dev"

// The RBAC the heartbeat needs, in the controller's namespace.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=qn-system,resources=leases,verbs=list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=qn-system,resources=leases,resourceNames=qn-controller-sync.qn.dev,verbs=get;update

// syncLag measures how far this replica's view of the API server lags it,
// the way a bookmark would: every interval it writes the current time and
// its own name into the sync Lease, and a watch of that Lease (an
// informer, as the controllers' caches are) tells when the write came
// back. The lag is the age of the newest heartbeat of its own the watch
// has delivered; a watch that stalls, an API server that stops answering
// or a replica that cannot write all make it grow. Each replica measures
// its own clock against itself: no clock skew enters.
type syncLag struct {
	client    kubernetes.Interface
	namespace string
	holder    string
	interval  time.Duration
	clock     clock.WithTicker
	// started is when the measurement began; seen the newest own
	// heartbeat (unix nanoseconds) the watch delivered, 0 before one.
	started atomic.Int64
	seen    atomic.Int64
	// lastErr is the last write's failure, for the detail.
	lastErr atomic.Pointer[string]
}

func newSyncLag(cfg *rest.Config, namespace, holder string, interval time.Duration, clk clock.WithTicker) (*syncLag, error) {
	// A client of its own: the heartbeat spends nothing of --kube-api-qps.
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("sync lag client: %w", err)
	}
	return &syncLag{client: cs, namespace: namespace, holder: holder, interval: interval, clock: clk}, nil
}

// Lag is the age of the newest own heartbeat the watch delivered (since
// the start, before the first).
func (s *syncLag) Lag() time.Duration {
	since := s.seen.Load()
	if since == 0 {
		since = s.started.Load()
	}
	if since == 0 {
		return 0
	}
	return s.clock.Since(time.Unix(0, since))
}

// Check fails once the lag reaches bound.
func (s *syncLag) Check(bound time.Duration) func(context.Context) error {
	return func(context.Context) error {
		if lag := s.Lag(); lag >= bound {
			msg := fmt.Sprintf("the informers lag the API server by %s (bound %s): the newest heartbeat written to Lease %s/%s has not come back through the watch", lag.Round(time.Millisecond), bound, s.namespace, SyncLeaseName)
			if e := s.lastErr.Load(); e != nil {
				msg += "; the last write failed: " + *e
			}
			return fmt.Errorf("%s", msg)
		}
		return nil
	}
}

// Detail is the lag for /readyz?verbose.
func (s *syncLag) Detail() string {
	return fmt.Sprintf("informers %s behind the API server (heartbeat Lease %s/%s)", s.Lag().Round(time.Millisecond), s.namespace, SyncLeaseName)
}

// Run writes a heartbeat every interval and watches them come back, until
// ctx ends.
func (s *syncLag) Run(ctx context.Context) error {
	s.started.Store(s.clock.Now().UnixNano())
	lw := toolscache.NewFilteredListWatchFromClient(s.client.CoordinationV1().RESTClient(), "leases", s.namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", SyncLeaseName).String()
		})
	informer := toolscache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, toolscache.Indexers{})
	observe := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != s.holder || l.Spec.RenewTime == nil {
			return
		}
		at := l.Spec.RenewTime.UnixNano()
		for {
			prev := s.seen.Load()
			if at <= prev || s.seen.CompareAndSwap(prev, at) {
				return
			}
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return err
	}
	go informer.Run(ctx.Done())
	ticker := s.clock.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		if err := s.beat(ctx); err != nil {
			msg := err.Error()
			s.lastErr.Store(&msg)
		} else {
			s.lastErr.Store(nil)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// beat writes the current time as this replica's heartbeat.
func (s *syncLag) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.interval)
	defer cancel()
	leases := s.client.CoordinationV1().Leases(s.namespace)
	now := metav1.NewMicroTime(s.clock.Now())
	l, err := leases.Get(ctx, SyncLeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: SyncLeaseName, Namespace: s.namespace}}
		l.Spec.HolderIdentity, l.Spec.RenewTime = &s.holder, &now
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.HolderIdentity, l.Spec.RenewTime = &s.holder, &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil // another replica's beat came first; the next tick writes ours
	}
	return err
}

// syncLagMetric is qn_controller_sync_lag_seconds.
func syncLagMetric(s *syncLag) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "qn_controller_sync_lag_seconds",
		Help: "How far this replica's informers lag the API server: the age of the newest heartbeat it wrote to the sync Lease that its watch has delivered back.",
	}, func() float64 { return s.Lag().Seconds() })
}

// podNamespace is the namespace of the Pod the process runs in, from its
// service account; empty outside a Pod.
func podNamespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
