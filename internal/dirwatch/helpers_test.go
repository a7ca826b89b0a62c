package dirwatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// deadline bounds every wait: long enough for a loaded CI machine running
// -race, and only reached when something is broken.
const deadline = 10 * time.Second

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustFingerprint(t *testing.T, dir string) string {
	t.Helper()
	fp, err := Fingerprint(dir)
	if err != nil {
		t.Fatalf("Fingerprint(%s): %v", dir, err)
	}
	return fp
}

// configMapVolume lays a directory out exactly as kubelet's atomic writer
// does: the data lives in a "..<timestamp>" directory, "..data" points at it,
// and every key is a top-level symlink through "..data". An update writes a
// new timestamped directory, points "..data_tmp" at it, renames that over
// "..data" (the atomic step), then removes the old directory.
type configMapVolume struct {
	dir     string
	version int
}

func newConfigMapVolume(t *testing.T, dir string, files map[string]string) *configMapVolume {
	t.Helper()
	v := &configMapVolume{dir: dir}
	v.update(t, files)
	return v
}

func (v *configMapVolume) update(t *testing.T, files map[string]string) {
	t.Helper()
	v.version++
	tsDir := fmt.Sprintf("..2026_11_22_10_00_%02d.%d", v.version, 1000+v.version)
	writeFiles(t, filepath.Join(v.dir, tsDir), files)
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(tsDir, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// gitSyncRoot lays a directory out as git-sync v4 does: the repository in
// root/.git, one worktree per commit in root/.worktrees/<hash> whose ".git"
// file points back with a relative "gitdir:", and root/<link> a symlink
// swapped atomically (a temporary link renamed over it) on every sync.
type gitSyncRoot struct {
	root, link string
	current    string
}

func newGitSyncRoot(t *testing.T, root string) *gitSyncRoot {
	t.Helper()
	writeFiles(t, filepath.Join(root, ".git"), map[string]string{
		"HEAD":   "ref: refs/heads/main\n",
		"config": "[core]\n\tbare = false\n",
	})
	return &gitSyncRoot{root: root, link: filepath.Join(root, "current")}
}

func (g *gitSyncRoot) sync(t *testing.T, hash string, files map[string]string) {
	t.Helper()
	wt := filepath.Join(g.root, ".worktrees", hash)
	writeFiles(t, wt, files)
	writeFiles(t, wt, map[string]string{".git": "gitdir: ../../.git/worktrees/" + hash + "\n"})
	writeFiles(t, filepath.Join(g.root, ".git", "worktrees", hash), map[string]string{
		"HEAD":      hash + "\n",
		"commondir": "../..\n",
		"gitdir":    wt + "/.git\n",
	})
	tmp := filepath.Join(g.root, "tmp-link")
	if err := os.Symlink(filepath.Join(".worktrees", hash), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, g.link); err != nil {
		t.Fatal(err)
	}
	if g.current != "" {
		// git-sync removes the previous worktree once the link moved on.
		if err := os.RemoveAll(filepath.Join(g.root, ".worktrees", g.current)); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(g.root, ".git", "worktrees", g.current)); err != nil {
			t.Fatal(err)
		}
	}
	g.current = hash
}

// check is one look the watcher took at the directory.
type check struct {
	fingerprint string
	changed     bool
	err         error
}

// harness runs a Watcher and records what it did.
type harness struct {
	w       *Watcher
	changes atomic.Int32
	changed chan struct{} // one per onChange
	checks  chan check
	cancel  context.CancelFunc
	done    chan error
}

// startWatcher runs a Watcher on dir until the test ends. configure may set
// test seams or wrap onChange before Run starts.
func startWatcher(t *testing.T, dir string, opts Options, onChange func(context.Context), configure ...func(*Watcher)) *harness {
	t.Helper()
	h := &harness{
		w:       New(dir, opts),
		changed: make(chan struct{}, 100),
		checks:  make(chan check, 1000),
		done:    make(chan error, 1),
	}
	started := make(chan struct{})
	h.w.onStart = func() { close(started) }
	h.w.onCheck = func(fp string, changed bool, err error) {
		h.checks <- check{fp, changed, err}
	}
	for _, c := range configure {
		c(h.w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		h.done <- h.w.Run(ctx, func(ctx context.Context) {
			h.changes.Add(1)
			if onChange != nil {
				onChange(ctx)
			}
			h.changed <- struct{}{}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(deadline):
			t.Error("Run did not return after its context was cancelled")
		}
	})
	select {
	case <-started:
	case err := <-h.done:
		t.Fatalf("Run returned before starting: %v", err)
	case <-time.After(deadline):
		t.Fatal("Run did not start")
	}
	return h
}

// waitChange waits for the next onChange.
func (h *harness) waitChange(t *testing.T) {
	t.Helper()
	select {
	case <-h.changed:
	case <-time.After(deadline):
		t.Fatalf("no onChange within %s", deadline)
	}
}

// waitLooked waits until the watcher has looked at the directory and seen
// the fingerprint it has now. From then on the content cannot surprise it,
// so counting onChange calls is final: no sleeping needed to prove "only one"
// or "none".
func (h *harness) waitLooked(t *testing.T, dir string) check {
	t.Helper()
	want := mustFingerprint(t, dir)
	timeout := time.After(deadline)
	for {
		select {
		case c := <-h.checks:
			if c.err == nil && c.fingerprint == want {
				return c
			}
		case <-timeout:
			t.Fatalf("the watcher did not look at the current content within %s", deadline)
		}
	}
}

// waitFailedLook waits until the watcher reported it could not read the
// directory.
func (h *harness) waitFailedLook(t *testing.T) {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case c := <-h.checks:
			if c.err != nil {
				return
			}
		case <-timeout:
			t.Fatalf("the watcher did not report an unreadable directory within %s", deadline)
		}
	}
}

// maxInFlight tracks how many calls run at once.
type maxInFlight struct {
	mu       sync.Mutex
	now, max int
}

func (m *maxInFlight) enter() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now++
	m.max = max(m.max, m.now)
}

func (m *maxInFlight) leave() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now--
}

func (m *maxInFlight) peak() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max
}
