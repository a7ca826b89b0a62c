package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// writer is the steady writer of the day-two test: about rate QuantumNode
// writes a second through the API server (creates, label updates and
// deletes that the policies admit, and every tenth a create they refuse on
// purpose), from several users so no rate window is reached. Every
// outcome is counted under the phase running when the write was sent.
type writer struct {
	clients []dynamic.Interface
	rate    int

	mu      sync.Mutex
	phase   string
	phases  []string
	results map[string]*phaseResult
	failed  []string
	live    []string // QuantumNodes created and not yet deleted
	seq     int
	// judged is false once the release is being uninstalled.
	judged bool
}

// phaseResult counts one phase's writes.
type phaseResult struct {
	admitted, deniedAsIntended, failed int
	latencies                          []time.Duration
}

func (r *phaseResult) p99() time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	l := append([]time.Duration(nil), r.latencies...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[(len(l)*99)/100]
}

func newWriter(t *testing.T, s *installed, users, rate int) *writer {
	t.Helper()
	w := &writer{rate: rate, results: map[string]*phaseResult{}, judged: true}
	for i := 0; i < users; i++ {
		cfg := rest.CopyConfig(s.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("steady-writer-%d", i), Groups: []string{"system:masters"}}
		cfg.Timeout = 15 * time.Second
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.clients = append(w.clients, dyn)
	}
	w.startPhase("quiet")
	return w
}

// unjudged says the release is going: a write it would have refused may
// now be admitted.
func (w *writer) unjudged() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.judged = false
}

func (w *writer) startPhase(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.phase = name
	w.phases = append(w.phases, name)
	w.results[name] = &phaseResult{}
}

// run writes until ctx ends.
func (w *writer) run(ctx context.Context) {
	tick := time.NewTicker(time.Second / time.Duration(w.rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.one()
		}()
	}
}

// one sends one write and counts its outcome.
func (w *writer) one() {
	w.mu.Lock()
	w.seq++
	seq, phase := w.seq, w.phase
	client := w.clients[seq%len(w.clients)].Resource(harness.QuantumNodes).Namespace(testNamespace)
	var op, name string
	switch {
	case seq%10 == 0:
		op, name = "refused create", fmt.Sprintf("steady-refused-%d", seq)
	case seq%3 == 1 && len(w.live) > 0:
		op, name = "update", w.live[seq%len(w.live)]
	case seq%3 == 2 && len(w.live) > 5:
		op, name = "delete", w.live[0]
		w.live = w.live[1:]
	default:
		op, name = "create", fmt.Sprintf("steady-%d", seq)
	}
	w.mu.Unlock()

	ctx := context.Background()
	start := time.Now()
	var err error
	switch op {
	case "create":
		_, err = client.Create(ctx, quantumNode(name, nil, nil), metav1.CreateOptions{})
	case "refused create":
		// The batch role needs label priority=low: refused by the role's
		// rules (the API server's policy, then the webhook).
		_, err = client.Create(ctx, quantumNode(name, map[string]any{"qn-role": "batch"}, nil), metav1.CreateOptions{})
	case "update":
		patch := fmt.Sprintf(`{"metadata":{"labels":{"steady-seq":"%d"}}}`, seq)
		_, err = client.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	case "delete":
		err = client.Delete(ctx, name, metav1.DeleteOptions{})
	}
	took := time.Since(start)

	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.results[phase]
	r.latencies = append(r.latencies, took)
	switch {
	case op == "refused create" && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)):
		r.deniedAsIntended++
	case op != "refused create" && err == nil:
		r.admitted++
		if op == "create" {
			w.live = append(w.live, name)
		}
	case op == "refused create" && err == nil && !w.judged:
		// After uninstall nothing judges: admitted, as Helm users expect.
		r.admitted++
	case op == "update" && apierrors.IsNotFound(err):
		// Deleted by a delete of this writer in flight: not the webhook's.
		r.admitted++
	default:
		r.failed++
		w.failed = append(w.failed, fmt.Sprintf("[%s] %s %s after %s: %v", phase, op, name, took.Round(time.Millisecond), err))
	}
}

// report is one line per phase, and the failures.
func (w *writer) report() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	failed := 0
	fmt.Fprintf(&b, "%-28s %8s %8s %7s %9s\n", "phase", "admitted", "refused", "failed", "p99")
	for _, p := range w.phases {
		r := w.results[p]
		failed += r.failed
		fmt.Fprintf(&b, "%-28s %8d %8d %7d %9s\n", p, r.admitted, r.deniedAsIntended, r.failed, r.p99().Round(time.Millisecond))
	}
	for _, f := range w.failed {
		b.WriteString(f + "\n")
	}
	return b.String(), failed
}
