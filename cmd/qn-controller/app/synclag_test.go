package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	testharness "github.com/quantumnode/qn-admission/test/harness"
)

// stallable holds back what watches deliver while stalled, as a watch
// stuck behind a slow API server or a broken connection would.
type stallable struct {
	next    http.RoundTripper
	stalled atomic.Bool
}

func (s *stallable) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err == nil && isWatch(req) {
		resp.Body = &stallingBody{ReadCloser: resp.Body, stalled: &s.stalled}
	}
	return resp, err
}

type stallingBody struct {
	io.ReadCloser
	stalled *atomic.Bool
	mu      sync.Mutex
}

func (b *stallingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.stalled.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	return b.ReadCloser.Read(p)
}

// The heartbeat against a real kube-apiserver: the lag stays small while
// the watch delivers; once the watch stalls the lag grows past the bound
// and the strict check fails, saying why; once it delivers again the check
// passes.
func TestSyncLagFailsTheStrictCheckWhenTheWatchStalls(t *testing.T) {
	env, cfg, err := testharness.StartControlPlane(testharness.ControlPlaneOptions{WithoutCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "qn-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	stall := &stallable{}
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { stall.next = next; return stall })
	const bound = time.Second
	lag, err := newSyncLag(cfg, "qn-system", "replica-a", bound/5, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lag.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	check := lag.Check(bound)

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testharness.WaitFor(t, 20*time.Second, what, func() error {
			if !cond() {
				return fmt.Errorf("lag %s, check %v", lag.Lag(), check(context.Background()))
			}
			return nil
		})
	}
	waitFor("the first heartbeat comes back", func() bool { return lag.seen.Load() != 0 })
	time.Sleep(3 * bound) // steady state
	if l := lag.Lag(); l >= bound/2 {
		t.Errorf("lag %s while the watch delivers; want well under %s", l, bound)
	}
	if err := check(context.Background()); err != nil {
		t.Errorf("the check fails while the watch delivers: %v", err)
	}

	stall.stalled.Store(true)
	waitFor("the check fails once the watch stalls", func() bool { return check(context.Background()) != nil })
	if err := check(context.Background()); !strings.Contains(err.Error(), "the informers lag the API server by") || lag.Lag() < bound {
		t.Errorf("lag %s, check %v", lag.Lag(), err)
	}

	stall.stalled.Store(false)
	waitFor("the check passes once the watch delivers again", func() bool { return check(context.Background()) == nil })
}
