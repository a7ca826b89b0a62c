package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/redistest"
)

// qn-webhook built with --window-store redis counts in the real Redis, and
// readiness and metrics show the store, its latency and each role's
// onStoreError.
func TestProgramCountsWindowsInRedis(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	s := start(t, dir, "--window-store=redis", "--redis-address="+srv.Addr)
	for _, uid := range []string{"w1", "w2"} {
		if got := s.admit(t, "/validate", review(uid, validSpec)); !got.Allowed {
			t.Fatalf("review %s: %+v", uid, got.Result)
		}
	}
	keys, err := srv.Client().Keys(context.Background(), "qn:window:default:user:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("window keys in Redis: %v %v; want alice's", keys, err)
	}
	if n, _ := srv.Client().ZCard(context.Background(), keys[0]).Result(); n != 2 {
		t.Fatalf("alice's window in Redis holds %d changes, want 2", n)
	}
	_, ready := s.probe(t, "/readyz?verbose")
	for _, want := range []string{"[+]windows ok: redis at " + srv.Addr + " (deadline 250ms): up", "latency p50", "onStoreError: batch failOpen, default failOpen, realtime failOpen"} {
		if !strings.Contains(ready, want) {
			t.Errorf("/readyz?verbose lacks %q:\n%s", want, ready)
		}
	}
	if code, body := s.probe(t, "/healthz?strict=true"); code != 200 {
		t.Errorf("with Redis answering, strict health passes: %d %q", code, body)
	}
	_, metrics := s.probe(t, "/metrics")
	for _, want := range []string{`qn_window_store_duration_seconds_count{op="take",store="redis"} 2`, `qn_window_store_up{store="redis"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if decisions, ok := awaitDecisions(t, filepath.Join(dir, "decisions.jsonl"), func(log string) bool {
		return strings.Contains(log, `"windowStore":{"onStoreError":"failOpen","latencyMs":`)
	}); !ok {
		t.Errorf("decision lines lack the window store:\n%s", decisions)
	}
}

// With --redis-sentinel-addresses and --redis-sentinel-master, qn-webhook
// asks the Sentinels where the master is and counts there; readiness names
// the master and the Sentinels.
func TestProgramCountsWindowsThroughSentinels(t *testing.T) {
	rep := redistest.StartReplicated(t)
	s := start(t, t.TempDir(), "--window-store=redis",
		"--redis-sentinel-addresses="+strings.Join(rep.SentinelAddrs(), ","), "--redis-sentinel-master="+redistest.MasterName)
	if got := s.admit(t, "/validate", review("s1", validSpec)); !got.Allowed {
		t.Fatalf("review s1: %+v", got.Result)
	}
	keys, err := rep.Master.Client().Keys(context.Background(), "qn:window:default:user:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("window keys on the master the Sentinels name: %v %v; want alice's", keys, err)
	}
	_, ready := s.probe(t, "/readyz?verbose")
	want := fmt.Sprintf("[+]windows ok: redis at master %q via sentinels %s (deadline 250ms): up", redistest.MasterName, strings.Join(rep.SentinelAddrs(), ","))
	if !strings.Contains(ready, want) {
		t.Errorf("/readyz?verbose lacks %q:\n%s", want, ready)
	}
}

// A Redis that does not answer at start does not keep qn-webhook from
// serving: the roles' onStoreError applies (failOpen for the bundled
// ones), and readiness says the store is down while staying ready.
func TestProgramStartsWhileRedisIsDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := l.Addr().String()
	l.Close()
	s := start(t, t.TempDir(), "--window-store=redis", "--redis-address="+nobody, "--window-store-timeout=100ms")
	got := s.admit(t, "/validate", review("down-1", validSpec))
	if !got.Allowed || !strings.Contains(strings.Join(got.Warnings, "\n"), "counted on this replica only") {
		t.Fatalf("with Redis down: allowed=%v warnings=%v", got.Allowed, got.Warnings)
	}
	code, ready := s.probe(t, "/readyz?verbose")
	if code != 200 || !strings.Contains(ready, "DOWN since") || !strings.Contains(ready, "connection refused") {
		t.Fatalf("/readyz?verbose with Redis down: %d\n%s", code, ready)
	}
	code, strict := s.probe(t, "/healthz?strict=true")
	if code != 503 || !strings.Contains(strict, "[-]windows failed (strict): the redis window store at "+nobody+" did not answer within its deadline 100ms") {
		t.Errorf("strict health with Redis down: %d %q, want 503 naming the store", code, strict)
	}
	if !strings.Contains(s.logs.String(), "Redis does not answer yet") {
		t.Errorf("no warning at start:\n%s", s.logs.String())
	}
}

func TestBuildRefusesWindowStoreMistakes(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"a store that does not exist":                  {[]string{"--window-store=etcd"}, `--window-store must be memory or redis, got "etcd"`},
		"a Redis address without a port":               {[]string{"--window-store=redis", "--redis-address=redis.data.svc"}, `--redis-address "redis.data.svc" is not host:port`},
		"a store deadline as long as any webhook's":    {[]string{"--window-store-timeout=10s"}, "--window-store-timeout must be positive and below 10s"},
		"no store deadline":                            {[]string{"--window-store-timeout=0s"}, "--window-store-timeout must be positive"},
		"a Redis CA without TLS":                       {[]string{"--window-store=redis", "--redis-tls-ca-file=/etc/ca.crt"}, "add --redis-tls"},
		"Sentinels without the master's name":          {[]string{"--window-store=redis", "--redis-sentinel-addresses=s1:26379,s2:26379"}, `--redis-sentinel-addresses and --redis-sentinel-master go together (got addresses "s1:26379,s2:26379", master "")`},
		"a master's name without Sentinels":            {[]string{"--window-store=redis", "--redis-sentinel-master=windows"}, "--redis-sentinel-addresses and --redis-sentinel-master go together"},
		"a Sentinel address without a port":            {[]string{"--window-store=redis", "--redis-sentinel-addresses=s1", "--redis-sentinel-master=windows"}, `--redis-sentinel-addresses "s1" is not host:port`},
		"an address and Sentinels":                     {[]string{"--window-store=redis", "--redis-address=r:6379", "--redis-sentinel-addresses=s1:26379", "--redis-sentinel-master=windows"}, "set one of --redis-address"},
		"Sentinels and a cluster":                      {[]string{"--window-store=redis", "--redis-cluster-addresses=c1:6379", "--redis-sentinel-addresses=s1:26379", "--redis-sentinel-master=windows"}, "set one of --redis-address"},
		"a cluster node without a port":                {[]string{"--window-store=redis", "--redis-cluster-addresses=c1:6379,c2"}, `--redis-cluster-addresses "c2" is not host:port`},
		"a Sentinel password file that cannot be read": {[]string{"--window-store=redis", "--redis-sentinel-addresses=s1:26379", "--redis-sentinel-master=windows", "--redis-sentinel-password-file=/nonexistent/spw"}, "--window-store redis: redis password file: open /nonexistent/spw"},
		"a Redis password file that cannot be read":    {[]string{"--window-store=redis", "--redis-password-file=/nonexistent/pw"}, "--window-store redis: redis password file: open /nonexistent/pw"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o := options(t, append(localArgs(t.TempDir()), c.args...)...)
			p, err := Build(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				p.close()
				t.Fatalf("Build succeeded, want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Build: %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// awaitDecisions reads the decision log at path until done accepts it or
// 5 seconds pass (lines are written together, a few milliseconds after the
// answers: --decision-log-flush-interval); it returns the last read.
func awaitDecisions(t *testing.T, path string, done func(string) bool) (string, bool) {
	t.Helper()
	var log string
	err := harness.Eventually(context.Background(), 5*time.Second, func() error {
		if log = readFile(t, path); !done(log) {
			return errors.New("not yet")
		}
		return nil
	})
	return log, err == nil
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
