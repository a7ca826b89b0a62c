package hostile

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantumnode/qn-admission/test/redistest"
)

// TestARedisAtMaxmemoryIsAnsweredAsOnStoreErrorSays: a user's Redis at its
// maxmemory with maxmemory-policy noeviction refuses the window's writes;
// qn-webhook counts nothing there, answers as the role's onStoreError says
// (failOpen: admitted with a warning, counted on the replica; failClosed:
// 503) with a message that says Redis is out of memory, logs why, and
// counts qn_window_store_errors_total{reason="oom"}. Before, the window
// script ran on and wrote past maxmemory, and the answers said nothing.
func TestARedisAtMaxmemoryIsAnsweredAsOnStoreErrorSays(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	dir := filepath.Join(t.TempDir(), "policies")
	copyBundle(t, dir)
	s := start(t, "--policy-dir", dir, "--policy-poll-interval", "100ms",
		"--window-store", "redis", "--redis-address", srv.Addr)
	s.normalStillWorks()
	windows := func() int64 {
		c := srv.Client()
		keys, err := c.Keys(context.Background(), "qn:window:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, k := range keys {
			m, err := c.ZCard(context.Background(), k).Result()
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
		return n
	}
	counted := windows()
	srv.FillToMaxmemory()

	// The bundle's default role fails open.
	r := s.post("/validate", review("oom-open", "alice", "CREATE", node("edge-1", nil, services(2))))
	warnings := strings.Join(r.review.Response.Warnings, "\n")
	if r.status != 200 || !r.review.Response.Allowed || !strings.Contains(warnings, "Redis is out of memory") || !strings.Contains(warnings, "counted on this replica only") {
		t.Fatalf("failOpen at maxmemory: want admitted, warned that Redis is out of memory; got HTTP %d %s", r.status, r.raw)
	}
	s.waitFor("the decision is logged", func() bool { return len(s.decisionLines("oom-open")) > 0 })
	line := s.decisionLines("oom-open")
	if len(line) != 1 || !strings.Contains(jsonString(line[0]["windowStore"]), "maxmemory") {
		t.Fatalf("the decision line does not say why: %v", line)
	}
	if got := s.metricLabelled(`qn_window_store_errors_total{op="take",reason="oom",store="redis"}`); got < 1 {
		t.Fatalf(`qn_window_store_errors_total{reason="oom"} = %v, want at least 1`, got)
	}

	// The same role failing closed.
	roles, err := os.ReadFile(filepath.Join(dir, "roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	closed := strings.Replace(string(roles), "window: {limit: 600, period: 60s, key: user}", "window: {limit: 600, period: 60s, key: user, onStoreError: failClosed}", 1)
	if closed == string(roles) {
		t.Fatal("the bundle's default role no longer reads 'window: {limit: 600, period: 60s, key: user}': update this test")
	}
	reloads := s.metricLabelled(`qn_admission_policy_reloads_total{result="success"}`)
	writeFile(t, filepath.Join(dir, "roles.yaml"), closed)
	s.waitFor("the failClosed role table is loaded", func() bool {
		return s.metricLabelled(`qn_admission_policy_reloads_total{result="success"}`) > reloads
	})
	r = s.post("/validate", review("oom-closed", "alice", "CREATE", node("edge-1", nil, services(2))))
	if r.review.Response.Allowed || r.code() != 503 || !strings.Contains(r.message(), "Redis is out of memory") {
		t.Fatalf("failClosed at maxmemory: want 503 saying Redis is out of memory; got HTTP %d %s", r.status, r.raw)
	}
	if n := windows(); n != counted {
		t.Fatalf("Redis' windows count %d changes after the refused ones, %d before: the script wrote at maxmemory", n, counted)
	}
	t.Logf("failOpen: %s\nfailClosed: %s", warnings, r.message())
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
