package policies

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quantumnode/qn-admission/internal/dirwatch"
	"github.com/quantumnode/qn-admission/internal/health"
)

// reloader keeps an Engine serving the newest policy set of a directory
// that loads cleanly. A broken change (bad YAML, a Rego error, a failing Rego
// test) keeps the last good set serving and is reported in the log, the
// metrics and Status.
type reloader struct {
	dir     string
	opts    OpenOptions
	watcher *dirwatch.Watcher
	engine  atomic.Pointer[Engine]

	mu          sync.Mutex
	lastErr     error
	lastAttempt time.Time
	// loadedAt is when the served set was loaded; failingSince is when
	// the current run of failed reloads or looks began (zero when none).
	loadedAt     time.Time
	failingSince time.Time
	// reloadingSince is when the reload under way began (zero when none):
	// a reload that does not finish (a read stuck in the kernel, a set
	// that takes minutes to compile) is reported like one that failed.
	reloadingSince time.Time
}

// stuckReload is how long a reload may run before Status says so.
const stuckReload = 30 * time.Second

// newReloader starts following opts.Dir. It is created before the first
// load (Load): it notes the directory's content now, so a change that lands
// between the first load and Run is still reloaded.
func newReloader(opts OpenOptions) *reloader {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Watch.Logger == nil {
		opts.Watch.Logger = opts.Logger
	}
	r := &reloader{dir: opts.Dir, opts: opts}
	watch := opts.Watch
	if watch.Include == nil {
		watch.Include = IsPolicyFile
	}
	next := watch.OnLook
	watch.OnLook = func(err error) {
		r.looked(err)
		if next != nil {
			next(err)
		}
	}
	r.watcher = dirwatch.New(r.dir, watch)
	return r
}

// unreadableError is a look at the directory that failed: it keeps the last
// good set serving like a failed reload, and clears once the directory can
// be read again.
type unreadableError struct{ err error }

func (e *unreadableError) Error() string {
	return "the policy directory cannot be read (deleted or replaced?): " + e.err.Error()
}

func (e *unreadableError) Unwrap() error { return e.err }

// looked records a look at the directory: an unreadable directory shows in
// Status and the metrics like a failed reload, not only in the log.
func (r *reloader) looked(err error) {
	r.mu.Lock()
	_, wasUnreadable := r.lastErr.(*unreadableError)
	switch {
	case err != nil:
		r.lastErr, r.lastAttempt = &unreadableError{err: err}, time.Now()
		if r.failingSince.IsZero() {
			r.failingSince = r.lastAttempt
		}
	case wasUnreadable:
		r.lastErr, r.failingSince = nil, time.Time{}
	}
	r.mu.Unlock()
	if err != nil && !wasUnreadable {
		r.opts.Metrics.Reloaded("", err)
	}
	if err == nil && wasUnreadable {
		r.opts.Metrics.Recovered()
	}
}

// Load is the first load of the directory; an error here has no last good
// set to fall back on.
func (r *reloader) Load(ctx context.Context) (*Set, error) {
	set, err := LoadDir(ctx, r.dir, r.opts.Load)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.loadedAt = time.Now()
	r.mu.Unlock()
	r.opts.Metrics.Reloaded(set.Revision, nil)
	return set, nil
}

// Name is the directory as given.
func (r *reloader) Name() string { return r.dir }

// FS reads the directory as loads do: regular files only, bounded.
func (r *reloader) FS() fs.FS { return newDirFS(r.dir, r.opts.Load) }

// LoadDir loads a policy directory from disk, naming the revision by the
// commit when the directory is a git-sync checkout (git:<commit>), else by
// a content hash. If the content changes while it is read (a ConfigMap or
// git-sync swap mid-way), it reads again, so a set never mixes two
// revisions.
func LoadDir(ctx context.Context, dir string, opts LoadOptions) (*Set, error) {
	const attempts = 3
	for i := 0; ; i++ {
		commit := dirwatch.WorktreeCommit(dir)
		before, err := Fingerprint(dir)
		if err != nil {
			return nil, fmt.Errorf("read policy directory %s: %w", dir, err)
		}
		set, err := Load(ctx, newDirFS(dir, opts), opts)
		if err != nil {
			return nil, fmt.Errorf("policy directory %s: %w", dir, err)
		}
		after, err := Fingerprint(dir)
		if err != nil {
			return nil, fmt.Errorf("read policy directory %s: %w", dir, err)
		}
		if before == after && commit == dirwatch.WorktreeCommit(dir) {
			if commit != "" {
				set.Revision = "git:" + commit
			}
			return set, nil
		}
		if i == attempts-1 {
			return nil, fmt.Errorf("policy directory %s kept changing while it was read (%d attempts)", dir, attempts)
		}
	}
}

// Reload loads the directory and swaps the new set into the engine Run
// serves if it loaded cleanly.
func (r *reloader) Reload(ctx context.Context) error {
	engine := r.engine.Load()
	if engine == nil {
		return fmt.Errorf("reload %s: no engine yet (call Run)", r.dir)
	}
	start := time.Now()
	r.mu.Lock()
	r.reloadingSince = start
	r.mu.Unlock()
	set, err := LoadDir(ctx, r.dir, r.opts.Load)
	r.mu.Lock()
	r.reloadingSince = time.Time{}
	r.lastErr, r.lastAttempt = err, start
	if err != nil && r.failingSince.IsZero() {
		r.failingSince = start
	}
	if err == nil {
		r.failingSince, r.loadedAt = time.Time{}, time.Now()
	}
	r.mu.Unlock()
	r.opts.Metrics.Reloaded(revisionOf(set), err)
	if err != nil {
		serving := "nothing"
		if cur := engine.Current(); cur != nil {
			serving = cur.Revision
		}
		r.opts.Logger.Error("policy reload failed; keeping the last good set", "dir", r.dir, "error", err.Error(), "servingRevision", serving)
		return err
	}
	prev := engine.Current()
	engine.Swap(set)
	if prev == nil || prev.Revision != set.Revision {
		r.opts.Logger.Info("policies loaded", "dir", r.dir, "revision", set.Revision, "roles", set.Roles.Names(), "took", time.Since(start).String())
	}
	return nil
}

// Run keeps engine serving the newest good set: it reloads on every
// content change of the directory until ctx ends.
func (r *reloader) Run(ctx context.Context, engine *Engine) error {
	r.engine.Store(engine)
	return r.watcher.Run(ctx, func(ctx context.Context) { _ = r.Reload(ctx) })
}

// Status says which revision is served and, when the last reload failed,
// when and why; and a reload running for longer than it should: readiness
// detail.
func (r *reloader) Status() string {
	revision, at, lastErr := r.lastReload()
	status := "serving " + revision
	if lastErr != nil {
		status = fmt.Sprintf("serving %s; the last reload (%s) failed and was not applied: %v", revision, at.UTC().Format(time.RFC3339), lastErr)
	}
	if err := r.stuck(time.Now(), stuckReload); err != nil {
		status += "; WARNING: " + err.Error()
	}
	return status
}

// stuck says when the reload under way has run for longer than limit.
func (r *reloader) stuck(now time.Time, limit time.Duration) error {
	r.mu.Lock()
	since := r.reloadingSince
	r.mu.Unlock()
	if since.IsZero() || now.Sub(since) <= limit {
		return nil
	}
	return fmt.Errorf("a reload of %s started %s ago (%s) has not finished; newer policies are not served until it does",
		r.dir, now.Sub(since).Round(time.Second), since.UTC().Format(time.RFC3339))
}

// lastReload reports the revision being served and the last reload: when
// it started and its error (nil when it succeeded).
func (r *reloader) lastReload() (revision string, lastAttempt time.Time, lastErr error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.engine.Load(); e != nil && e.Current() != nil {
		revision = e.Current().Revision
	}
	return revision, r.lastAttempt, r.lastErr
}

// ReloadState is what strict health judges: the served set, when it was
// loaded, and since when (and why) newer content fails to load. A reload
// still running counts as failing from its start, so one that never
// finishes fails strict health after the grace like a broken push.
func (r *reloader) ReloadState() health.ReloadState {
	revision, lastAttempt, lastErr := r.lastReload()
	r.mu.Lock()
	defer r.mu.Unlock()
	state := health.ReloadState{Revision: revision, LoadedAt: r.loadedAt, LastAttempt: lastAttempt, FailingSince: r.failingSince, Err: lastErr}
	if since := r.reloadingSince; !since.IsZero() && (state.FailingSince.IsZero() || since.Before(state.FailingSince)) {
		state.FailingSince = since
		state.Err = fmt.Errorf("a reload started %s has not finished", since.UTC().Format(time.RFC3339))
	}
	return state
}

func revisionOf(s *Set) string {
	if s == nil {
		return ""
	}
	return s.Revision
}
