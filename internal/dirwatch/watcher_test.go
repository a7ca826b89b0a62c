package dirwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	clocktesting "k8s.io/utils/clock/testing"

	testharness "github.com/quantumnode/qn-admission/test/harness"
)

// eventOptions make the watcher react to events only: the poll is an hour
// away, so a test passing proves the events did the work.
func eventOptions(t *testing.T) Options {
	return Options{
		Debounce:     30 * time.Millisecond,
		PollInterval: time.Hour,
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

var basePolicies = map[string]string{
	"roles.yaml":      "roles:\n  default: {}\n",
	"common.rego":     "package common\n",
	"lib/zones.rego":  "package lib.zones\n",
	"data.json":       `{"zones": ["cn-shanghai"]}`,
	"tests/a_test.go": "not a policy, still content\n",
}

func TestRunReportsEachContentChangeOnce(t *testing.T) {
	cases := map[string]func(t *testing.T, dir string){
		"a file edited in place": func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"roles.yaml": "roles:\n  batch: {}\n"})
		},
		"a file saved by an editor through a temporary file and a rename": func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"roles.yaml.tmp4913": "roles:\n  batch: {}\n"})
			if err := os.Rename(filepath.Join(dir, "roles.yaml.tmp4913"), filepath.Join(dir, "roles.yaml")); err != nil {
				t.Fatal(err)
			}
		},
		"a burst of ten writes within the debounce": func(t *testing.T, dir string) {
			for i := range 10 {
				writeFiles(t, dir, map[string]string{"roles.yaml": fmt.Sprintf("roles:\n  r%d: {}\n", i)})
			}
		},
		"a new file": func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"windows.rego": "package windows\n"})
		},
		"a file removed": func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "common.rego")); err != nil {
				t.Fatal(err)
			}
		},
		"a file in a subdirectory edited": func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"lib/zones.rego": "package lib.zones\n\nallowed := {\"cn-beijing\"}\n"})
		},
		"a new file in a new subdirectory": func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"extra/deep/rate.rego": "package rate\n"})
		},
		"a subdirectory removed": func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "lib")); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, basePolicies)
			h := startWatcher(t, dir, eventOptions(t), nil)

			change(t, dir)
			h.waitChange(t)
			h.waitLooked(t, dir)
			if n := h.changes.Load(); n != 1 {
				t.Fatalf("onChange called %d times, want 1", n)
			}
		})
	}
}

func TestRunIgnoresEventsThatLeaveContentUnchanged(t *testing.T) {
	cases := map[string]struct {
		setup  func(t *testing.T, dir string) string // returns the watched path
		change func(t *testing.T, dir string)
	}{
		"a file touched, then rewritten with the same bytes": {
			setup: plainDir,
			change: func(t *testing.T, dir string) {
				future := time.Now().Add(time.Hour)
				if err := os.Chtimes(filepath.Join(dir, "roles.yaml"), future, future); err != nil {
					t.Fatal(err)
				}
				writeFiles(t, dir, map[string]string{"roles.yaml": basePolicies["roles.yaml"]})
			},
		},
		"an editor's swap file created and removed": {
			setup: plainDir,
			change: func(t *testing.T, dir string) {
				writeFiles(t, dir, map[string]string{".roles.yaml.swp": "swap"})
				if err := os.Remove(filepath.Join(dir, ".roles.yaml.swp")); err != nil {
					t.Fatal(err)
				}
			},
		},
		"a ConfigMap swap delivering the same files": {
			setup: func(t *testing.T, dir string) string {
				newConfigMapVolume(t, dir, flat(basePolicies))
				return dir
			},
			change: func(t *testing.T, dir string) {
				(&configMapVolume{dir: dir, version: 1}).update(t, flat(basePolicies))
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			watched := tc.setup(t, dir)
			h := startWatcher(t, watched, eventOptions(t), nil)

			tc.change(t, dir)
			if c := h.waitLooked(t, watched); c.changed {
				t.Fatal("the look after the event reported a change")
			}
			if n := h.changes.Load(); n != 0 {
				t.Fatalf("onChange called %d times, want 0", n)
			}
		})
	}
}

func plainDir(t *testing.T, dir string) string {
	writeFiles(t, dir, basePolicies)
	return dir
}

// flat keeps the top-level files: a ConfigMap has no subdirectories.
func flat(files map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range files {
		if !strings.Contains(k, "/") {
			out[k] = v
		}
	}
	return out
}

func TestRunSeesAtomicSwaps(t *testing.T) {
	updated := map[string]string{
		"roles.yaml":  "roles:\n  realtime: {}\n",
		"common.rego": "package common\n",
		"data.json":   `{"zones": ["cn-beijing"]}`,
	}
	type deployment struct {
		watched      string
		update       func(t *testing.T)
		wantRevision string
		// steps is how many states the update passes through that a
		// watcher may see: kubelet links a new key only after swapping
		// ..data, so a busy machine can see the swap and the new link as
		// two changes (both are real states of the directory).
		steps int32
	}
	cases := map[string]func(t *testing.T, dir string) deployment{
		"a ConfigMap update: kubelet swaps ..data to a new timestamped directory": func(t *testing.T, dir string) deployment {
			v := newConfigMapVolume(t, dir, flat(basePolicies))
			return deployment{watched: dir, update: func(t *testing.T) { v.update(t, updated) }}
		},
		"a ConfigMap update that adds a key": func(t *testing.T, dir string) deployment {
			v := newConfigMapVolume(t, dir, map[string]string{"roles.yaml": basePolicies["roles.yaml"]})
			return deployment{watched: dir, update: func(t *testing.T) { v.update(t, updated) }, steps: 2}
		},
		"a git-sync update: the link is swapped to a new worktree": func(t *testing.T, dir string) deployment {
			g := newGitSyncRoot(t, dir)
			g.sync(t, sha1, basePolicies)
			return deployment{
				watched:      g.link,
				update:       func(t *testing.T) { g.sync(t, sha2, updated) },
				wantRevision: sha2,
			}
		},
		"a git-sync update with the policies in a subdirectory of the checkout": func(t *testing.T, dir string) deployment {
			g := newGitSyncRoot(t, dir)
			g.sync(t, sha1, prefixed("policies/", basePolicies))
			return deployment{
				watched:      filepath.Join(g.link, "policies"),
				update:       func(t *testing.T) { g.sync(t, sha2, prefixed("policies/", updated)) },
				wantRevision: sha2,
			}
		},
		"a release symlink swapped while the old release stays on disk": func(t *testing.T, dir string) deployment {
			link := releases(t, dir, "")
			return deployment{watched: link, update: func(t *testing.T) { swapRelease(t, dir, "v2", updated, "") }}
		},
		"a release symlink swapped, the policies in a subdirectory, the old release kept": func(t *testing.T, dir string) deployment {
			link := releases(t, dir, "policies/")
			return deployment{
				watched: filepath.Join(link, "policies"),
				update:  func(t *testing.T) { swapRelease(t, dir, "v2", updated, "policies/") },
			}
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			d := setup(t, t.TempDir())
			h := startWatcher(t, d.watched, eventOptions(t), nil)

			d.update(t)
			h.waitChange(t)
			h.waitLooked(t, d.watched)
			if n := h.changes.Load(); n < 1 || n > max(d.steps, 1) {
				t.Fatalf("onChange called %d times, want 1 (at most %d for an update in %d steps)", n, max(d.steps, 1), d.steps)
			}
			plain := t.TempDir()
			writeFiles(t, plain, updated)
			if got, want := mustFingerprint(t, d.watched), mustFingerprint(t, plain); got != want {
				t.Fatalf("Fingerprint after the swap = %s, want %s (a plain directory with the same files)", got, want)
			}
			if got := WorktreeCommit(d.watched); got != d.wantRevision {
				t.Fatalf("WorktreeCommit after the swap = %q, want %q", got, d.wantRevision)
			}
		})
	}
}

// releases lays out dir/releases/v1 and dir/current -> releases/v1, the
// way a hand-rolled atomic deploy (ln -sfn) does, and returns the link.
func releases(t *testing.T, dir, prefix string) string {
	t.Helper()
	swapRelease(t, dir, "v1", basePolicies, prefix)
	return filepath.Join(dir, "current")
}

// swapRelease writes a release and points the link at it atomically; old
// releases stay, so only the link's own directory sees anything happen.
func swapRelease(t *testing.T, dir, name string, files map[string]string, prefix string) {
	t.Helper()
	writeFiles(t, filepath.Join(dir, "releases", name), prefixed(prefix, files))
	tmp := filepath.Join(dir, "current.tmp")
	if err := os.Symlink(filepath.Join("releases", name), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
}

func prefixed(prefix string, files map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range files {
		out[prefix+k] = v
	}
	return out
}

func TestRunSurvivesTheDirectoryDisappearing(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "policies")
	writeFiles(t, dir, basePolicies)
	h := startWatcher(t, dir, eventOptions(t), nil)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h.waitFailedLook(t)

	// Prepared aside and renamed in, so the watcher sees it whole.
	next := filepath.Join(parent, "next")
	writeFiles(t, next, map[string]string{"roles.yaml": "roles:\n  batch: {}\n"})
	if err := os.Rename(next, dir); err != nil {
		t.Fatal(err)
	}
	h.waitChange(t)
	h.waitLooked(t, dir)

	// It watches the new directory, not only its parent.
	writeFiles(t, dir, map[string]string{"roles.yaml": "roles:\n  realtime: {}\n"})
	h.waitChange(t)
	if n := h.changes.Load(); n != 2 {
		t.Fatalf("onChange called %d times, want 2", n)
	}
}

func TestRunReportsADirectoryThatAppearsAfterStart(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "policies")
	h := startWatcher(t, dir, eventOptions(t), nil)

	next := filepath.Join(parent, "next")
	writeFiles(t, next, basePolicies)
	if err := os.Rename(next, dir); err != nil {
		t.Fatal(err)
	}
	h.waitChange(t)
}

func TestRunPollsWhenEventsAreUnavailable(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, basePolicies)
	clk := clocktesting.NewFakeClock(time.Now())
	var logs testharness.Output
	opts := Options{
		Debounce:     30 * time.Millisecond,
		PollInterval: 10 * time.Second,
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		Clock:        clk,
	}
	h := startWatcher(t, dir, opts, nil, func(w *Watcher) {
		w.newNotifier = func() (*fsnotify.Watcher, error) {
			return nil, errors.New("too many open files")
		}
	})
	if !strings.Contains(logs.String(), "polling only") {
		t.Errorf("no warning about polling only; log:\n%s", logs.String())
	}

	writeFiles(t, dir, map[string]string{"roles.yaml": "roles:\n  batch: {}\n"})
	clk.Step(opts.PollInterval)
	h.waitChange(t)
	if c := h.waitLooked(t, dir); !c.changed {
		t.Fatal("the poll that called onChange did not report a change")
	}

	// The next poll looks again and finds nothing new.
	clk.Step(opts.PollInterval)
	if c := h.waitLooked(t, dir); c.changed {
		t.Fatal("the second poll reported a change")
	}
	if n := h.changes.Load(); n != 1 {
		t.Fatalf("onChange called %d times, want 1", n)
	}
}

func TestRunNeverRunsOnChangeConcurrently(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, basePolicies)
	var (
		inFlight            maxInFlight
		entered             = make(chan int, 10)
		release             = make(chan struct{})
		mu                  sync.Mutex
		firstLeft, secondIn time.Time
		calls               int
	)
	h := startWatcher(t, dir, eventOptions(t), func(ctx context.Context) {
		inFlight.enter()
		defer inFlight.leave()
		mu.Lock()
		calls++
		n := calls
		if n == 2 {
			secondIn = time.Now()
		}
		mu.Unlock()
		entered <- n
		if n == 1 {
			<-release // a slow reload: compile and self-test a large set
			mu.Lock()
			firstLeft = time.Now()
			mu.Unlock()
		}
	})

	writeFiles(t, dir, map[string]string{"roles.yaml": "roles:\n  batch: {}\n"})
	waitEntered(t, entered, 1)
	// Changed again while the first reload is still running.
	writeFiles(t, dir, map[string]string{"roles.yaml": "roles:\n  realtime: {}\n"})
	close(release)
	waitEntered(t, entered, 2)
	h.waitChange(t)
	h.waitChange(t)

	if got := inFlight.peak(); got != 1 {
		t.Fatalf("%d onChange calls ran at once, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !secondIn.After(firstLeft) {
		t.Fatalf("second onChange started at %v, before the first returned at %v", secondIn, firstLeft)
	}
}

func waitEntered(t *testing.T, entered <-chan int, want int) {
	t.Helper()
	select {
	case n := <-entered:
		if n != want {
			t.Fatalf("onChange call %d entered, want %d", n, want)
		}
	case <-time.After(deadline):
		t.Fatalf("onChange call %d never entered", want)
	}
}

func TestRunReturnsWhenTheContextEnds(t *testing.T) {
	cases := map[string]struct {
		dir       func(t *testing.T) string
		configure func(*Watcher)
	}{
		"while watching an idle directory": {
			dir: func(t *testing.T) string { return plainDir(t, t.TempDir()) },
		},
		"while the directory is missing and retried": {
			dir: func(t *testing.T) string { return filepath.Join(t.TempDir(), "missing") },
		},
		"while polling only": {
			dir: func(t *testing.T) string { return plainDir(t, t.TempDir()) },
			configure: func(w *Watcher) {
				w.newNotifier = func() (*fsnotify.Watcher, error) { return nil, errors.New("no inotify") }
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := New(tc.dir(t), eventOptions(t))
			if tc.configure != nil {
				tc.configure(w)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, func(context.Context) {}) }()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run = %v, want nil after cancel", err)
				}
			case <-time.After(deadline):
				t.Fatal("Run did not return after its context was cancelled")
			}
		})
	}
}

func TestRunRefusesMisuse(t *testing.T) {
	dir := plainDir(t, t.TempDir())
	if err := New(dir, Options{}).Run(context.Background(), nil); err == nil {
		t.Error("Run with a nil onChange: no error")
	}

	h := startWatcher(t, dir, eventOptions(t), nil)
	if err := h.w.Run(context.Background(), func(context.Context) {}); err == nil {
		t.Error("a second Run while the first runs: no error")
	}
}

func TestNewFillsDefaults(t *testing.T) {
	w := New(t.TempDir(), Options{})
	if w.opts.Debounce != defaultDebounce || w.opts.PollInterval != defaultPollInterval {
		t.Errorf("defaults = debounce %v, poll %v; want %v, %v",
			w.opts.Debounce, w.opts.PollInterval, defaultDebounce, defaultPollInterval)
	}
	if w.opts.Logger == nil || w.opts.Clock == nil {
		t.Error("no default logger or clock")
	}
}

func TestWatchTargetsCoverEverySymlinkOnThePath(t *testing.T) {
	root := t.TempDir()
	g := newGitSyncRoot(t, root)
	g.sync(t, sha1, prefixed("policies/", basePolicies))
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	worktree := filepath.Join(realRoot, ".worktrees", sha1)

	got := watchTargets(filepath.Join(g.link, "policies"))
	want := map[string]map[string]bool{
		// The swap of "current" is only visible in the git-sync root...
		realRoot: {"current": true},
		// ...and "policies" itself going away in the worktree holding it...
		worktree: {"policies": true},
		// ...and the content in the policy directory and below.
		filepath.Join(worktree, "policies"):       nil,
		filepath.Join(worktree, "policies/lib"):   nil,
		filepath.Join(worktree, "policies/tests"): nil,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("watchTargets =\n%v\nwant\n%v", got, want)
	}
}
