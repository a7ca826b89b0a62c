package e2e

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
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/redistest"
)

// replica is one qn-webhook process of a test, with a client that trusts
// its self-signed CA.
type replica struct {
	*harness.Webhook
	client *http.Client
}

// startReplicas runs n qn-webhook processes serving policyDir with extra
// flags, each on its own ports and certificate, stopped (and required to
// exit cleanly) when the test ends.
func startReplicas(t *testing.T, n int, policyDir string, extra ...string) []replica {
	t.Helper()
	var rs []replica
	for i := range n {
		args := append([]string{"--policy-dir", policyDir}, extra...)
		w, err := startWebhook(filepath.Join(t.TempDir(), fmt.Sprintf("certs-%d", i)), args...)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(w.CABundle)
		rs = append(rs, replica{Webhook: w, client: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 16},
		}})
	}
	t.Cleanup(func() {
		for i, r := range rs {
			if err := r.Stop(); err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
			if t.Failed() {
				t.Logf("replica %d logs:\n%s", i, r.Logs())
			}
		}
	})
	return rs
}

// windowPolicies writes the bundled policies to a new directory with
// roles.yaml's text edited by the replacements (old, new, old, new...),
// each of which must apply.
func windowPolicies(t *testing.T, replacements ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "policies")
	if err := harness.WriteBundledPolicies(dir); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "roles.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(replacements); i += 2 {
		if !strings.Contains(s, replacements[i]) {
			t.Fatalf("roles.yaml has no %q to replace", replacements[i])
		}
		s = strings.Replace(s, replacements[i], replacements[i+1], 1)
	}
	if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// answer is what a test reads from an AdmissionReview response.
type answer struct {
	Allowed  bool
	Code     int32
	Message  string
	Retry    int32
	Warnings []string
	sent     time.Time
	received time.Time
}

// review sends one CREATE of a QuantumNode by user under role ("" for the
// default role) to r's /validate, with the given request uid.
func (r replica) review(t *testing.T, uid, user, role string) answer {
	t.Helper()
	annotations := map[string]string{}
	labels := map[string]string{}
	if role == "realtime" {
		annotations["qn.dev/latency-budget-ms"] = "20"
		labels["topology.kubernetes.io/zone"] = "cn-shanghai"
	}
	if role != "" {
		annotations["qn-role"] = role
	}
	name := "qn-" + uid
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid":       uid,
			"kind":      map[string]string{"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
			"resource":  map[string]string{"group": "qn.dev", "version": "v1alpha1", "resource": "quantumnodes"},
			"namespace": "edge", "name": name, "operation": "CREATE",
			"userInfo": map[string]any{"username": user, "groups": []string{"system:authenticated"}},
			"object": map[string]any{
				"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
				"metadata": map[string]any{"name": name, "namespace": "edge", "annotations": annotations, "labels": labels},
				"spec":     map[string]any{"hardware": map[string]string{"arch": "arm64"}, "services": []map[string]any{{"name": "mqtt", "port": 8883}}},
			},
		},
	})
	a := answer{sent: time.Now()}
	resp, err := r.client.Post(r.URL("/validate"), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("POST /validate: %v", err)
		return a
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a.received = time.Now()
	var out struct {
		Response struct {
			UID      string
			Allowed  bool
			Warnings []string
			Status   *struct {
				Code    int32
				Message string
				Details *struct{ RetryAfterSeconds int32 }
			}
		}
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || out.Response.UID != uid {
		t.Errorf("review %s: HTTP %d %s", uid, resp.StatusCode, raw)
		return a
	}
	a.Allowed, a.Warnings = out.Response.Allowed, out.Response.Warnings
	if s := out.Response.Status; s != nil {
		a.Code, a.Message = s.Code, s.Message
		if s.Details != nil {
			a.Retry = s.Details.RetryAfterSeconds
		}
	}
	return a
}

// TestThreeReplicasEnforceOneWindow: one user sends 150 realtime CREATEs
// (120 per 60 s) spread round-robin over three qn-webhook processes that
// share one redis-server: exactly 120 are admitted and 30 refused with 429
// and a retry-after within the window. The same against three memory
// stores admits all 150, which is the bug this store fixes.
func TestThreeReplicasEnforceOneWindow(t *testing.T) {
	srv := redistest.Start(t)
	dir := windowPolicies(t)
	cases := map[string]struct {
		flags    []string
		admitted int
	}{
		// A deadline no stall of a loaded test machine reaches: this test
		// is about exactness; TestWindowStoreOutage is about deadlines.
		"a shared Redis store: one window": {flags: []string{"--window-store", "redis", "--redis-address", srv.Addr, "--window-store-timeout", "5s"}, admitted: 120},
		"memory stores: a window each":     {flags: []string{"--window-store", "memory"}, admitted: 150},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rs := startReplicas(t, 3, dir, tc.flags...)
			start := time.Now()
			var mu sync.Mutex
			var answers []answer
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= 150 {
							return
						}
						a := rs[i%3].review(t, fmt.Sprintf("%s-%03d", strings.Fields(name)[1], i), "alice", "realtime")
						mu.Lock()
						answers = append(answers, a)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if elapsed := time.Since(start); elapsed > 50*time.Second {
				t.Fatalf("150 reviews took %s: they no longer fit in one 60 s window, so this test proves nothing", elapsed)
			}
			admitted, refused := 0, 0
			for _, a := range answers {
				switch {
				case a.Allowed:
					admitted++
				case a.Code == http.StatusTooManyRequests && a.Retry >= 1 && a.Retry <= 60 &&
					strings.Contains(a.Message, `rate window full: role "realtime" allows 120 changes per 1m0s per user`) &&
					strings.Contains(a.Message, "has made 120 in the last 1m0s; a slot frees in"):
					refused++
				default:
					t.Errorf("neither admitted nor a correct 429: %+v", a)
				}
			}
			if admitted != tc.admitted || refused != 150-tc.admitted {
				t.Fatalf("%d admitted, %d refused with 429; want %d and %d", admitted, refused, tc.admitted, 150-tc.admitted)
			}
			if tc.admitted != 120 {
				return
			}
			// The apiserver retries a request with the same uid, perhaps
			// to another replica: an admitted uid is admitted again and
			// counts once; a refused one stays refused.
			for i := range 3 {
				if a := rs[(i+1)%3].review(t, fmt.Sprintf("shared-%03d", i), "alice", "realtime"); !a.Allowed {
					t.Errorf("retry of admitted uid shared-%03d on another replica refused: %+v", i, a)
				}
			}
			c := srv.Client()
			keys, err := c.Keys(context.Background(), "qn:window:realtime:user:*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("window keys %v, %v; want one for alice", keys, err)
			}
			if n, err := c.ZCard(context.Background(), keys[0]).Result(); err != nil || n != 120 {
				t.Fatalf("alice's window holds %d changes after the retries (%v), want 120", n, err)
			}
			if strings.Contains(keys[0], "alice") {
				t.Errorf("the Redis key %s names the user", keys[0])
			}
			// Another user has a window of their own.
			if a := rs[0].review(t, "bob-1", "bob", "realtime"); !a.Allowed {
				t.Errorf("bob refused by alice's full window: %+v", a)
			}
		})
	}
}

// TestReplicasNeverExceedAShortWindowAtItsEdges sends a steady stream of
// one user's changes to three replicas with a window of 5 per second for
// three seconds, so changes keep leaving the window while others arrive.
// An admitted change was recorded between its send and its answer; no set
// of changes that must all have been recorded within one second may be
// larger than the limit.
func TestReplicasNeverExceedAShortWindowAtItsEdges(t *testing.T) {
	srv := redistest.Start(t)
	dir := windowPolicies(t, "window: {limit: 120, period: 60s, key: user}", "window: {limit: 5, period: 1s, key: user}")
	rs := startReplicas(t, 3, dir, "--window-store", "redis", "--redis-address", srv.Addr, "--window-store-timeout", "5s")
	const limit, period, run = 5, time.Second, 3 * time.Second
	var mu sync.Mutex
	var admitted []answer
	var seq atomic.Int64
	stop := time.Now().Add(run)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				a := rs[w%3].review(t, fmt.Sprintf("edge-%05d", seq.Add(1)), "alice", "realtime")
				if a.Allowed {
					mu.Lock()
					admitted = append(admitted, a)
					mu.Unlock()
				} else if a.Code != http.StatusTooManyRequests {
					t.Errorf("refused with %d, not 429: %s", a.Code, a.Message)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].sent.Before(admitted[j].sent) })
	for _, a := range admitted {
		within := 0
		for _, b := range admitted {
			if !b.sent.Before(a.sent) && b.received.Before(a.sent.Add(period)) {
				within++
			}
		}
		if within > limit {
			t.Fatalf("%d changes admitted within one %s window starting at %s; the limit is %d", within, period, a.sent.Format(time.StampMicro), limit)
		}
	}
	if min := int(run/period) * limit / 2; len(admitted) < min {
		t.Fatalf("only %d changes admitted in %s; slots should free every %s", len(admitted), run, period)
	}
	t.Logf("%d changes admitted in %s over 3 replicas (at most %d allowed)", len(admitted), run, (int(run/period)+1)*limit)
}

// TestWindowStoreOutage kills and then stalls the shared redis-server while
// two replicas take a steady load under two roles: realtime fails closed,
// the default role fails open. No request waits past the store deadline,
// failClosed refuses with 503, failOpen admits with a warning and counts on
// the replica, readiness, metrics and the decision log show it, and
// counting resumes in Redis when it returns.
func TestWindowStoreOutage(t *testing.T) {
	srv := redistest.Start(t)
	dir := windowPolicies(t,
		"window: {limit: 120, period: 60s, key: user}", "window: {limit: 120, period: 60s, key: user, onStoreError: failClosed}",
		"window: {limit: 600, period: 60s, key: user}", "window: {limit: 600, period: 60s, key: user, onStoreError: failOpen}")
	const deadline = 200 * time.Millisecond
	rs := startReplicas(t, 2, dir, "--window-store", "redis", "--redis-address", srv.Addr, "--window-store-timeout", deadline.String())
	var seq atomic.Int64
	uid := func() string { return fmt.Sprintf("outage-%05d", seq.Add(1)) }
	for i, r := range rs {
		for _, role := range []string{"realtime", ""} {
			if a := r.review(t, uid(), "alice", role); !a.Allowed {
				t.Fatalf("replica %d, role %q before the outage: %+v", i, role, a)
			}
		}
	}

	// slack covers a loaded 2-core machine: TLS, decoding and Rego run
	// around the store call, whose own wait the deadline bounds.
	const slack = 300 * time.Millisecond
	outage := func(name string, begin, end func()) {
		t.Run(name, func(t *testing.T) {
			begin()
			var wg sync.WaitGroup
			var closedOK, openOK atomic.Int64
			for i, r := range rs {
				wg.Go(func() {
					for range 15 {
						a := r.review(t, uid(), "alice", "realtime")
						if took := a.received.Sub(a.sent); took > deadline+slack {
							t.Errorf("replica %d: a failClosed review took %s; the store deadline is %s", i, took, deadline)
						}
						if !a.Allowed && a.Code == http.StatusServiceUnavailable && a.Retry == 1 && strings.Contains(a.Message, "onStoreError: failClosed") {
							closedOK.Add(1)
						} else {
							t.Errorf("replica %d: realtime with Redis down: %+v, want 503 failing closed", i, a)
						}
						b := r.review(t, uid(), "alice", "")
						if took := b.received.Sub(b.sent); took > deadline+slack {
							t.Errorf("replica %d: a failOpen review took %s", i, took)
						}
						if b.Allowed && strings.Contains(strings.Join(b.Warnings, "\n"), "counted on this replica only") {
							openOK.Add(1)
						} else {
							t.Errorf("replica %d: default role with Redis down: %+v, want admitted with a warning", i, b)
						}
					}
				})
			}
			wg.Wait()
			if closedOK.Load() != 30 || openOK.Load() != 30 {
				t.Fatalf("%d of 30 refused failing closed, %d of 30 admitted failing open", closedOK.Load(), openOK.Load())
			}
			for i, r := range rs {
				ready, err := r.Readiness()
				if err != nil || !strings.Contains(ready, "DOWN since") || !strings.Contains(ready, "default failOpen") || !strings.Contains(ready, "realtime failClosed") || !strings.HasSuffix(strings.TrimSpace(ready), "ok") {
					t.Errorf("replica %d /readyz?verbose during the outage (%v):\n%s", i, err, ready)
				}
				metrics, _ := r.Metrics()
				if !strings.Contains(metrics, `qn_window_store_up{store="redis"} 0`) || !strings.Contains(metrics, "qn_window_store_errors_total{") {
					t.Errorf("replica %d metrics lack the outage:\n%s", i, grepLines(metrics, "qn_window_store"))
				}
				for _, want := range []string{`"windowStore":{"onStoreError":"failOpen"`, `"countedLocally":true`, `"windowStore":{"onStoreError":"failClosed"`, `"error":"rate window store unavailable`} {
					if !logsEventuallyContain(context.Background(), r, want) {
						t.Errorf("replica %d decision log lacks the store failure (%s):\n%s", i, want, grepLines(r.Logs(), "window"))
					}
				}
			}

			end()
			// Counting resumes in Redis with the first request after it
			// is back.
			for i, r := range rs {
				if err := harness.Eventually(context.Background(), 10*time.Second, func() error {
					if a := r.review(t, uid(), "alice", "realtime"); !a.Allowed {
						return fmt.Errorf("realtime still refused: %d %s", a.Code, a.Message)
					}
					return nil
				}); err != nil {
					t.Fatalf("replica %d after Redis returned: %v", i, err)
				}
				if ready, _ := r.Readiness(); strings.Contains(ready, "DOWN since") {
					t.Errorf("replica %d still reports the store down:\n%s", i, ready)
				}
			}
			keys, err := srv.Client().Keys(context.Background(), "qn:window:realtime:user:*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("realtime window keys after Redis returned: %v %v", keys, err)
			}
		})
	}
	outage("redis killed, then restarted empty", srv.Kill, srv.Restart)
	outage("redis stalled (SIGSTOP), then resumed", srv.Pause, srv.Resume)
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
