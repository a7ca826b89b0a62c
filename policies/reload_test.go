package policies

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumnode/qn-admission/internal/dirwatch"
)

const reloadRoles = "defaultRole: r\nroles:\n  r:\n    operations: [CREATE, UPDATE]\n    packages: [p]\n"

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReloadKeepsServingThroughBrokenChanges: good → broken → fixed, with
// decisions flowing the whole time. None fails, and each decision comes from
// a whole revision, never a mix.
func TestReloadKeepsServingThroughBrokenChanges(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"roles.yaml": reloadRoles,
		"p.rego":     "package p\ndeny contains \"v1 says no\" if input.context.labels.deny == \"yes\"\n",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloader := newReloader(OpenOptions{Dir: dir,
		Watch:  dirwatch.Options{Debounce: 20 * time.Millisecond, PollInterval: 50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	set, err := reloader.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	engine := NewEngine(set, EngineOptions{})
	go reloader.Run(ctx, engine)

	// Requests flow during every swap; each must be a clean decision.
	var failures atomic.Int64
	var decided atomic.Int64
	var mu sync.Mutex
	seen := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d := engine.Validate(ctx, node{labels: map[string]string{"deny": "yes"}}.input())
				decided.Add(1)
				if d.Allowed || d.Code != 403 {
					failures.Add(1)
				}
				mu.Lock()
				seen[d.Message] = true
				mu.Unlock()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	v1 := engine.Current().Revision
	// Broken: a syntax error. The old set keeps serving, the error names the file.
	writeFiles(t, dir, map[string]string{"p.rego": "package p\ndeny contains \"v2\" if {\n"})
	waitFor(t, "the broken change is reported", func() bool { _, _, err := reloader.lastReload(); return err != nil })
	rev, _, lastErr := reloader.lastReload()
	if rev != v1 || !strings.Contains(lastErr.Error(), "p.rego:") {
		t.Fatalf("a broken change must keep %s serving and name the file; serving %s, error %v", v1, rev, lastErr)
	}
	// Broken differently: a failing Rego test blocks the swap too. The test
	// goes in first: a reload between the two writes must not see the new
	// policy without the test that fails it (and rightly swap it in).
	writeFiles(t, dir, map[string]string{
		"p_test.rego": "package p_test\ntest_wrong if data.p.deny[\"something else\"] with input as {\"context\": {\"labels\": {\"deny\": \"yes\"}}}\n",
	})
	writeFiles(t, dir, map[string]string{
		"p.rego": "package p\ndeny contains \"v3 says no\" if input.context.labels.deny == \"yes\"\n",
	})
	waitFor(t, "the failing test is reported", func() bool {
		_, _, err := reloader.lastReload()
		return err != nil && strings.Contains(err.Error(), "p_test.rego:2: p_test.test_wrong: test rule evaluated to false or undefined")
	})
	if engine.Current().Revision != v1 {
		t.Fatal("a set whose Rego tests fail must not be swapped in")
	}
	// Fixed: the new set serves.
	writeFiles(t, dir, map[string]string{
		"p_test.rego": "package p_test\ntest_right if data.p.deny[\"v3 says no\"] with input as {\"context\": {\"labels\": {\"deny\": \"yes\"}}}\n",
	})
	waitFor(t, "the fixed set serves", func() bool {
		_, _, err := reloader.lastReload()
		return err == nil && engine.Current().Revision != v1
	})
	n := decided.Load()
	waitFor(t, "more decisions are made after the swap", func() bool { return decided.Load() > n+100 })
	close(stop)
	wg.Wait()
	stop = make(chan struct{})

	if failures.Load() != 0 {
		t.Fatalf("%d of %d decisions failed during reloads", failures.Load(), decided.Load())
	}
	want := map[string]bool{
		`denied by qn-admission (role "r"): v1 says no`: true,
		`denied by qn-admission (role "r"): v3 says no`: true,
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("decisions came only from whole revisions v1 and v3; saw %v", seen)
	}
	t.Logf("%d decisions during 3 reloads, none failed", decided.Load())
}

func TestRevisionIsTheCommitOfAGitSyncCheckout(t *testing.T) {
	root := t.TempDir()
	commit := "0123456789abcdef0123456789abcdef01234567"
	worktree := filepath.Join(root, ".worktrees", commit)
	if err := os.MkdirAll(filepath.Join(worktree, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, filepath.Join(worktree, "policies"), map[string]string{"roles.yaml": reloadRoles, "p.rego": "package p\n"})
	if err := os.Symlink(filepath.Join(".worktrees", commit), filepath.Join(root, "repo")); err != nil {
		t.Fatal(err)
	}
	set, err := LoadDir(context.Background(), filepath.Join(root, "repo", "policies"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if set.Revision != "git:"+commit {
		t.Fatalf("revision %q, want git:%s", set.Revision, commit)
	}
	plain := t.TempDir()
	writeFiles(t, plain, map[string]string{"roles.yaml": reloadRoles, "p.rego": "package p\n"})
	if set, err = LoadDir(context.Background(), plain, LoadOptions{}); err != nil || !strings.HasPrefix(set.Revision, "sha256:") {
		t.Fatalf("a plain directory is named by a content hash, got %q %v", set.Revision, err)
	}
}

// TestADeletedDirectoryShowsInStatusAndMetrics: deleting the policy
// directory (a ConfigMap removed, a checkout wiped) calls no reload, but it
// is visible in Status and qn_admission_policy_reload_failing, the last
// good set keeps serving, and it clears when the directory is back.
func TestADeletedDirectoryShowsInStatusAndMetrics(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "policies")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"roles.yaml": reloadRoles,
		"p.rego":     "package p\ndeny contains \"no\" if input.context.labels.deny == \"yes\"\n",
	}
	writeFiles(t, dir, files)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	reloader := newReloader(OpenOptions{Dir: dir,
		Watch:   dirwatch.Options{Debounce: 20 * time.Millisecond, PollInterval: 50 * time.Millisecond},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: metrics,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	set, err := reloader.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	engine := NewEngine(set, EngineOptions{})
	go reloader.Run(ctx, engine)
	served := set.Revision

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted directory shows in Status", func() bool {
		return strings.Contains(reloader.Status(), "cannot be read")
	})
	if st := reloader.Status(); !strings.Contains(st, "serving "+served) {
		t.Fatalf("Status must say the last good set still serves: %s", st)
	}
	if got := testutil.ToFloat64(metrics.reloadFailing); got != 1 {
		t.Fatalf("qn_admission_policy_reload_failing = %v with the directory deleted, want 1", got)
	}
	if d := engine.Validate(ctx, node{labels: map[string]string{"deny": "yes"}}.input()); d.Allowed || engine.Current().Revision != served {
		t.Fatalf("the last good set keeps judging: %+v", d)
	}

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, files)
	waitFor(t, "the restored directory clears Status", func() bool { return reloader.Status() == "serving "+served })
	if got := testutil.ToFloat64(metrics.reloadFailing); got != 0 {
		t.Fatalf("qn_admission_policy_reload_failing = %v with the directory back, want 0", got)
	}
}
