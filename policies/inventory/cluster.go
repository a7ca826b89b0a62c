package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	// Config reaches the API server.
	Config *rest.Config
	// MaxLag is how far behind the API server the inventory may be before
	// policies may not read it (Document fails; the role's onError
	// decides). Default DefaultMaxLag.
	MaxLag time.Duration
	// PublishInterval is how often changes are gathered into a new
	// document. Default DefaultPublishInterval.
	PublishInterval time.Duration
	// Logger receives watch failures and recoveries.
	Logger *slog.Logger
}

// DefaultMaxLag bounds how stale an inventory policies may read: long
// enough to ride out an API server restart or a relist, short enough that
// a claim is not judged against a minute-old world.
const DefaultMaxLag = 30 * time.Second

// DefaultPublishInterval gathers the changes of this long into one new
// document: at 100 writes a second, ten documents a second.
const DefaultPublishInterval = 100 * time.Millisecond

// Cluster is the inventory qn-webhook keeps: one informer per declared
// kind, each object pruned to what the policy set reads, published as one
// immutable document. Safe for concurrent use.
type Cluster struct {
	opts    ClusterOptions
	dynamic dynamic.Interface
	finder  *resourceFinder
	doc     *document

	mu      sync.Mutex
	ctx     context.Context // set by Run; informers stop with it
	watches map[schema.GroupVersionKind]*kindWatch
	pending bool // Ensure was called before Run
	// missing says which declared kinds the API server does not serve:
	// policies may not read an inventory that lacks one.
	missing string
}

// kindWatch is the informer of one kind.
type kindWatch struct {
	kind       policies.InventoryKind
	gvk        schema.GroupVersionKind
	resource   schema.GroupVersionResource
	namespaced bool
	fields     [][]string
	informer   cache.SharedIndexInformer
	cancel     context.CancelFunc
	// brokenSince is when the watch last failed without a list since
	// (unix nanoseconds; 0: healthy); lastErr is why.
	brokenSince atomic.Int64
	lastErr     atomic.Pointer[string]
	synced      atomic.Bool
}

// NewCluster connects to the API server; no watch starts before Ensure
// and Run.
func NewCluster(opts ClusterOptions) (*Cluster, error) {
	if opts.MaxLag <= 0 {
		opts.MaxLag = DefaultMaxLag
	}
	if opts.PublishInterval <= 0 {
		opts.PublishInterval = DefaultPublishInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	dyn, err := dynamic.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	finder, err := newResourceFinder(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	return &Cluster{
		opts:    opts,
		dynamic: dyn,
		finder:  finder,
		doc:     newDocument(),
		watches: map[schema.GroupVersionKind]*kindWatch{},
	}, nil
}

// Ensure watches the kinds a policy set declares, keeping of each object
// the fields its policies read; a kind already watched with the same
// fields goes on, one whose fields changed is listed again, one no longer
// declared stops. The error names every kind that could not be watched,
// at its line in roles.yaml; the others are watched. It is an
// *UnservedError when the API server answered that it does not serve one
// of them; otherwise (discovery did not answer) calling Ensure again
// later may succeed, and until it does Ready and Document fail.
func (c *Cluster) Ensure(kinds []policies.InventoryKind, reads rego.InventoryReads) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var problems []string
	unserved := false
	want := map[schema.GroupVersionKind]bool{}
	for _, k := range kinds {
		gvk, resource, namespaced, err := c.finder.resolve(k)
		if err != nil {
			unserved = unserved || errors.Is(err, errNotServed)
			problems = append(problems, err.Error())
			continue
		}
		want[gvk] = true
		fields := reads.Fields(k.APIVersion, k.Kind)
		if w := c.watches[gvk]; w != nil {
			if slices.EqualFunc(w.fields, fields, slices.Equal) {
				continue
			}
			c.stop(w)
		}
		w := &kindWatch{kind: k, gvk: gvk, resource: resource, namespaced: namespaced, fields: fields}
		c.watches[gvk] = w
		if c.ctx != nil {
			c.start(w)
		} else {
			c.pending = true
		}
	}
	for gvk, w := range c.watches {
		if !want[gvk] {
			c.stop(w)
			delete(c.watches, gvk)
		}
	}
	c.missing = strings.Join(problems, "; ")
	switch {
	case unserved:
		return &UnservedError{msg: c.missing}
	case len(problems) > 0:
		return errors.New(c.missing)
	}
	return nil
}

// UnservedError says the API server does not serve a declared kind.
type UnservedError struct{ msg string }

func (e *UnservedError) Error() string { return e.msg }

// Missing reports whether a declared kind could not be watched at the
// last Ensure (call it again).
func (c *Cluster) Missing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.missing != ""
}

// Run starts the watches Ensure asked for and publishes their changes
// until ctx ends.
func (c *Cluster) Run(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	for _, w := range c.watches {
		if w.informer == nil {
			c.start(w)
		}
	}
	c.mu.Unlock()
	t := time.NewTicker(c.opts.PublishInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.doc.publish()
		}
	}
}

func (c *Cluster) stop(w *kindWatch) {
	if w.cancel != nil {
		w.cancel()
	}
	c.doc.dropKind(w.gvk.GroupVersion().String(), w.gvk.Kind)
}

// start runs w's informer. Called with c.mu held and c.ctx set.
func (c *Cluster) start(w *kindWatch) {
	ctx, cancel := context.WithCancel(c.ctx)
	w.cancel = cancel
	res := c.dynamic.Resource(w.resource)
	// A watch is broken from its first failure until a list or a watch
	// succeeds again. The reflector retries a refused connection itself,
	// without telling its error handler, so the calls are watched here.
	broken := func(err error) {
		msg := err.Error()
		w.lastErr.Store(&msg)
		if w.brokenSince.CompareAndSwap(0, time.Now().UnixNano()) {
			c.opts.Logger.Warn("inventory watch failed", "kind", w.kind.String(), "err", err)
		}
	}
	healed := func() {
		if w.brokenSince.Swap(0) != 0 {
			c.opts.Logger.Info("inventory watch recovered", "kind", w.kind.String())
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := res.List(ctx, opts)
			if err != nil {
				broken(err)
			} else {
				healed()
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			wi, err := res.Watch(ctx, opts)
			if err != nil {
				broken(err)
			} else {
				healed()
			}
			return wi, err
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { broken(err) })
	fields := w.fields
	_ = inf.SetTransform(func(obj any) (any, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return &unstructured.Unstructured{Object: prune(u.Object, fields)}, nil
		}
		return obj, nil
	})
	gv, kind := w.gvk.GroupVersion().String(), w.gvk.Kind
	put := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		t, err := term(u.Object)
		if err != nil {
			c.opts.Logger.Warn("inventory object not kept", "kind", w.kind.String(), "name", u.GetName(), "err", err)
			return
		}
		c.doc.put(u.GetNamespace(), gv, kind, u.GetName(), t)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    put,
		UpdateFunc: func(_, obj any) { put(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				c.doc.remove(u.GetNamespace(), gv, kind, u.GetName())
			}
		},
	})
	w.informer = inf
	go inf.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			if !w.namespaced {
				c.doc.holdKind(gv, kind)
			}
			c.doc.publish()
			w.synced.Store(true)
			c.opts.Logger.Info("inventory synced", "kind", w.kind.String(), "fields", fieldNames(fields))
		}
	}()
}

// Document is the inventory as policies read it, or why they may not:
// a kind not synced yet, or the inventory further behind the API server
// than MaxLag.
func (c *Cluster) Document() (ast.Object, error) {
	if err := c.Ready(); err != nil {
		return nil, err
	}
	if lag, why := c.lag(time.Now()); lag > c.opts.MaxLag {
		return nil, fmt.Errorf("the inventory is %s behind the API server (more than %s): %s", lag.Round(time.Second), c.opts.MaxLag, why)
	}
	return c.doc.current(), nil
}

// Ready fails until every watched kind has synced once.
func (c *Cluster) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var waiting []string
	for _, w := range c.watches {
		if !w.synced.Load() {
			waiting = append(waiting, w.kind.String())
		}
	}
	if len(waiting) > 0 {
		sort.Strings(waiting)
		return fmt.Errorf("the inventory has not synced %s yet", strings.Join(waiting, ", "))
	}
	if c.missing != "" {
		return errors.New(c.missing)
	}
	return nil
}

// Lag is how far behind the API server the inventory may be: the longest
// a watch has been broken without a new list, or else how long a change
// has waited to be published.
func (c *Cluster) Lag() time.Duration {
	lag, _ := c.lag(time.Now())
	return lag
}

func (c *Cluster) lag(now time.Time) (time.Duration, string) {
	lag, why := c.doc.unpublishedFor(now), "changes not yet published"
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.watches {
		if since := w.brokenSince.Load(); since != 0 {
			if d := now.Sub(time.Unix(0, since)); d > lag {
				lag, why = d, fmt.Sprintf("the watch of %s is broken", w.kind)
				if e := w.lastErr.Load(); e != nil {
					why += ": " + *e
				}
			}
		}
	}
	return lag, why
}

// Strict fails when the inventory cannot be read by policies: not
// synced, a declared kind not watched, or behind past MaxLag (the strict
// health check, which pages where readiness must not lock writes out).
func (c *Cluster) Strict(context.Context) error {
	if err := c.Ready(); err != nil {
		return err
	}
	if lag, why := c.lag(time.Now()); lag > c.opts.MaxLag {
		return fmt.Errorf("inventory %s behind (more than %s): %s", lag.Round(time.Second), c.opts.MaxLag, why)
	}
	return nil
}

// Detail says what the inventory holds, for /readyz?verbose.
func (c *Cluster) Detail() string {
	counts := c.doc.count()
	c.mu.Lock()
	var parts []string
	for _, w := range c.watches {
		state := "synced"
		if !w.synced.Load() {
			state = "syncing"
		}
		key := w.gvk.GroupVersion().String() + " " + w.gvk.Kind
		parts = append(parts, fmt.Sprintf("%s: %d (%s; fields %s)", key, counts[key], state, fieldNames(w.fields)))
	}
	c.mu.Unlock()
	sort.Strings(parts)
	lag, _ := c.lag(time.Now())
	return fmt.Sprintf("lag %s; %s", lag.Round(time.Millisecond), strings.Join(parts, ", "))
}

// Collectors are the inventory's metrics: qn_inventory_lag_seconds,
// qn_inventory_objects{kind} and qn_inventory_synced.
func (c *Cluster) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qn_inventory_lag_seconds",
			Help: "How far behind the API server the inventory may be: the longest a watch has been broken without a new list, else how long a change waits to be published."},
			func() float64 { return c.Lag().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qn_inventory_synced",
			Help: "1 when every kind of the inventory has synced once."},
			func() float64 {
				if c.Ready() == nil {
					return 1
				}
				return 0
			}),
		objectsCollector{c},
	}
}

var objectsDesc = prometheus.NewDesc("qn_inventory_objects", "Objects the inventory holds, by kind.", []string{"kind"}, nil)

type objectsCollector struct{ c *Cluster }

func (o objectsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- objectsDesc }

func (o objectsCollector) Collect(ch chan<- prometheus.Metric) {
	for kind, n := range o.c.doc.count() {
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(n), kind)
	}
}

func fieldNames(fields [][]string) string {
	if len(fields) == 0 {
		return "name only"
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = strings.Join(f, ".")
		if names[i] == "" {
			names[i] = "(whole object)"
		}
	}
	return strings.Join(names, ",")
}
