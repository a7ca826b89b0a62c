// Package hostile drives the real qn-webhook binary with what an attacker
// would send, and holds it to the bounds docs/reliability.md promises: a
// clear answer to every request, memory that stays bounded, and a next
// normal request that still succeeds.
package hostile

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	admissionv1 "k8s.io/api/admission/v1"
)

// rssLimit is the memory the suite holds qn-webhook to: the peak RSS
// (VmHWM) of the whole process, every case included, stays under it.
const rssLimit = 128 << 20

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "qn-hostile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary, err = harness.Build(context.Background(), dir, "./cmd/qn-webhook")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one running qn-webhook and a client that trusts it.
type server struct {
	t      *testing.T
	proc   *harness.Webhook
	client *http.Client
	// peakAnon is the most anonymous memory (heap, stacks: what the
	// kernel cannot reclaim) seen by a sampler reading /proc every 5 ms.
	peakAnon atomic.Uint64
}

func start(t *testing.T, extra ...string) *server {
	t.Helper()
	return startIn(t, t.TempDir(), extra...)
}

// startIn is start with the self-signed pair written to certDir.
func startIn(t *testing.T, certDir string, extra ...string) *server {
	t.Helper()
	proc, err := harness.StartWebhook(binary, certDir, harness.WebhookOptions{Args: extra})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proc.Stop(); err != nil {
			t.Errorf("stop qn-webhook: %v", err)
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(proc.CABundle)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	s := &server{t: t, proc: proc, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	done := make(chan struct{})
	sampled := make(chan struct{})
	go s.sampleAnon(done, sampled)
	t.Cleanup(func() { close(done); <-sampled })
	return s
}

// sampleAnon keeps peakAnon until done.
func (s *server) sampleAnon(done <-chan struct{}, sampled chan<- struct{}) {
	defer close(sampled)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, err := harness.ReadProc(s.proc.PID()); err == nil && st.RSSAnon > s.peakAnon.Load() {
			s.peakAnon.Store(st.RSSAnon)
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

// reply is what came back for one request.
type reply struct {
	status int
	review admissionv1.AdmissionReview
	raw    []byte
}

func (r reply) code() int32 {
	if r.review.Response == nil || r.review.Response.Result == nil {
		return 0
	}
	return r.review.Response.Result.Code
}

func (r reply) message() string {
	if r.review.Response == nil || r.review.Response.Result == nil {
		return ""
	}
	return r.review.Response.Result.Message
}

// send posts body and requires a well-formed AdmissionReview back.
func (s *server) send(method, path, contentType string, body io.Reader) reply {
	s.t.Helper()
	r, err := s.trySend(method, path, contentType, body)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// trySend is send for other goroutines than the test's: it returns what
// went wrong instead of stopping the test.
func (s *server) trySend(method, path, contentType string, body io.Reader) (reply, error) {
	req, err := http.NewRequest(method, s.proc.URL(path), body)
	if err != nil {
		return reply{}, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return reply{}, err
	}
	r := reply{status: resp.StatusCode, raw: raw}
	if err := json.Unmarshal(raw, &r.review); err != nil || r.review.Kind != "AdmissionReview" || r.review.Response == nil {
		return r, fmt.Errorf("%s %s: HTTP %d is not a well-formed AdmissionReview: %.300s", method, path, resp.StatusCode, raw)
	}
	return r, nil
}

// postConcurrently posts body to path from n goroutines at once and
// returns every reply; a request that got no well-formed answer fails the
// test.
func (s *server) postConcurrently(n int, path func(i int) string, body []byte) []reply {
	s.t.Helper()
	replies := make([]reply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			replies[i], errs[i] = s.trySend(http.MethodPost, path(i), "application/json", bytes.NewReader(body))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			s.t.Fatal(err)
		}
	}
	return replies
}

func (s *server) post(path string, body []byte) reply {
	s.t.Helper()
	return s.send(http.MethodPost, path, "application/json", bytes.NewReader(body))
}

// normalStillWorks sends an ordinary review that the bundled policies admit.
func (s *server) normalStillWorks() {
	s.t.Helper()
	r := s.post("/validate", review("normal-after", "alice", "CREATE", node("edge-1", nil, services(2))))
	if r.status != 200 || !r.review.Response.Allowed || r.review.Response.UID != "normal-after" {
		s.t.Fatalf("the next normal request was not admitted: HTTP %d %.300s", r.status, r.raw)
	}
}

// memory reads VmRSS and VmHWM and fails the test above rssLimit.
func (s *server) memory() harness.ProcStats {
	s.t.Helper()
	return s.memoryUnder(rssLimit)
}

// memoryUnder is memory with another bound, on the peak of anonymous
// memory: the binary's own pages (RssFile) are reclaimable page cache that
// a container's limit does not OOM-kill for, and they grow with the code
// linked in, not with what a caller sends. Peak RSS (VmHWM) is reported
// beside it.
func (s *server) memoryUnder(bound uint64) harness.ProcStats {
	s.t.Helper()
	st, err := harness.ReadProc(s.proc.PID())
	if err != nil {
		s.t.Fatal(err)
	}
	peak := max(s.peakAnon.Load(), st.RSSAnon)
	if peak > bound {
		s.t.Errorf("qn-webhook's anonymous memory peaked at %.1f MiB (peak RSS %.1f MiB, of which %.1f MiB the binary's pages), over the %d MiB bound",
			mib(peak), mib(st.HWM), mib(st.RSSFile), bound>>20)
	}
	return st
}

// probe GETs a probe path, returning status and body.
func (s *server) probe(path string) (int, string) {
	s.t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + s.proc.Probe + path)
	if err != nil {
		s.t.Fatalf("probe %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// review is an AdmissionReview of a QuantumNode.
func review(uid, user, op string, object any) []byte {
	r := map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid":       uid,
			"kind":      map[string]any{"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
			"resource":  map[string]any{"group": "qn.dev", "version": "v1alpha1", "resource": "quantumnodes"},
			"namespace": "edge", "name": "edge-1", "operation": op,
			"userInfo": map[string]any{"username": user, "groups": []string{"edge-ops", "system:authenticated"}},
			"object":   object,
		},
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return b
}

func mustObjectJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// node is a QuantumNode with annotations and services.
func node(name string, annotations map[string]string, svcs []any) map[string]any {
	meta := map[string]any{"name": name, "namespace": "edge"}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	return map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": meta,
		"spec": map[string]any{"hardware": map[string]any{"arch": "arm64"}, "services": svcs},
	}
}

// shortServices returns n valid, distinct services with short names: the
// 2.79 MB, 100,000-service object of the finding.
func shortServices(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"name": fmt.Sprintf("s%d", i), "port": 1 + i%65535}
	}
	return out
}

// services returns n valid, distinct services with names of 63 characters,
// the longest the CRD admits.
func services(n int) []any {
	out := make([]any, n)
	for i := range out {
		name := fmt.Sprintf("s%d-", i)
		out[i] = map[string]any{"name": name + strings.Repeat("x", 63-len(name)), "port": 1024 + i}
	}
	return out
}
