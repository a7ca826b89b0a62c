package dirwatch

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// Defaults for Options, chosen for the server: kubelet and git-sync finish a
// swap in milliseconds, and a missed event costs at most one poll interval.
const (
	DefaultDebounce     = 500 * time.Millisecond
	DefaultPollInterval = 10 * time.Second
)

// Options tune a Watcher; the zero value is ready to use.
type Options struct {
	// Debounce is how long the directory must stay quiet after an event
	// before it is looked at, so that a burst (a kubelet swap, a git
	// checkout, an editor's save) yields one reload. Default 500ms. A
	// directory that never goes quiet is still looked at every PollInterval.
	Debounce time.Duration
	// PollInterval is how often the directory is looked at whatever the
	// events say: the safety net when events are lost (NFS, inotify limits,
	// a symlink swapped somewhere not watched). Default 10s.
	PollInterval time.Duration
	// Logger receives warnings (watching failed, directory unreadable) and a
	// line per change seen. Default slog.Default().
	Logger *slog.Logger
	// Clock is where the debounce and poll timers come from, so tests can
	// step time. Default the real clock.
	Clock clock.WithTicker
}

// Watcher reports content changes of one policy directory. Create it with
// New before loading the directory the first time, then call Run.
type Watcher struct {
	dir   string
	opts  Options
	log   *slog.Logger
	clock clock.WithTicker

	// last is the fingerprint of the content the caller holds, and baseErr
	// why it could not be taken. Only Run touches them after New.
	last    string
	baseErr error

	running atomic.Bool

	// Seams for tests: a notifier that fails to start (poll-only mode), a
	// signal that watches are in place, and a report after every look at the
	// directory, so tests wait for what happened instead of sleeping.
	newNotifier func() (*fsnotify.Watcher, error)
	onStart     func()
	onCheck     func(fingerprint string, changed bool, err error)
}

// New returns a Watcher for dir. It takes the content fingerprint right away,
// so call it before the initial load: a change landing between that load and
// Run is still reported (at worst as one reload of content already loaded).
// A directory that does not exist yet is not an error; when it appears, Run
// reports it as a change.
func New(dir string, opts Options) *Watcher {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	// Absolute, because watches and symlink resolution must not depend on a
	// working directory that could change after New.
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	w := &Watcher{
		dir:         dir,
		opts:        opts,
		log:         opts.Logger.With("policyDir", dir),
		clock:       opts.Clock,
		newNotifier: fsnotify.NewWatcher,
	}
	w.last, w.baseErr = Fingerprint(dir)
	return w
}

// Run watches the directory until ctx ends, then returns nil. After events
// have been quiet for the debounce, and on every poll, it fingerprints the
// directory and calls onChange only if the fingerprint differs from the one
// the caller last saw. It never calls onChange at start, and never twice at
// once: changes during a slow onChange are reported after it returns.
//
// Watching is best effort: if it cannot start, Run logs a warning and polls.
// A directory that is missing or unreadable (mid-swap, deleted) is logged and
// looked at again, with backoff up to the poll interval.
func (w *Watcher) Run(ctx context.Context, onChange func(ctx context.Context)) error {
	if onChange == nil {
		return errors.New("dirwatch: Run needs an onChange function")
	}
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("dirwatch: Run is already running for " + w.dir)
	}
	defer w.running.Store(false)

	l := &loop{w: w, onChange: onChange, retry: w.opts.Debounce}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if n, err := w.newNotifier(); err != nil {
		w.log.Warn("cannot watch the policy directory for changes; polling only",
			"pollInterval", w.opts.PollInterval, "error", err)
	} else {
		defer n.Close()
		l.notifier = n
		events, errs = n.Events, n.Errors
	}
	l.syncWatches()
	if w.baseErr != nil {
		l.fail(w.baseErr)
	}

	poll := w.clock.NewTicker(w.opts.PollInterval)
	defer poll.Stop()
	defer l.stopTimer()
	if w.onStart != nil {
		w.onStart()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil // the notifier died; the poll carries on
				continue
			}
			if l.relevant(ev) {
				l.arm(w.opts.Debounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// An overflow means events were dropped: look, rather than trust
			// that nothing happened.
			w.log.Warn("watching the policy directory reported an error", "error", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				l.arm(w.opts.Debounce)
			}
		case <-l.timerC:
			l.timerC = nil
			l.check(ctx)
		case <-poll.C():
			l.check(ctx)
		}
	}
}

// loop is the state of one Run. Everything here runs on Run's goroutine.
type loop struct {
	w        *Watcher
	onChange func(context.Context)
	notifier *fsnotify.Watcher // nil when polling only

	// filters maps each watched directory to the entry names whose events
	// matter there; nil means all of them. See watchTargets.
	filters   map[string]map[string]bool
	warnedAdd bool

	timer  clock.Timer
	timerC <-chan time.Time

	retry   time.Duration // next delay after a failed look
	failing bool          // the last look failed; logged once per streak
}

// check looks at the directory and reports a change to the caller.
func (l *loop) check(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	w := l.w
	// Re-add watches first: a swap leaves the old target directory gone and
	// the new one unwatched.
	l.syncWatches()
	fp, err := Fingerprint(w.dir)
	if err != nil {
		l.fail(err)
		w.report("", false, err)
		return
	}
	if l.failing {
		w.log.Info("policy directory is readable again")
		l.failing = false
	}
	w.baseErr = nil
	l.retry = w.opts.Debounce
	changed := fp != w.last
	if changed {
		w.log.Info("policy directory changed", "fingerprint", fp, "previous", w.last)
		w.last = fp
		l.onChange(ctx)
	}
	w.report(fp, changed, nil)
}

// fail schedules another look with backoff; a directory gone for good then
// costs a look per poll interval and one warning, not a log line per event.
func (l *loop) fail(err error) {
	if !l.failing {
		l.w.log.Warn("cannot read the policy directory; keeping the current policies and retrying", "error", err)
		l.failing = true
	} else {
		l.w.log.Debug("policy directory still unreadable", "error", err)
	}
	l.arm(l.retry)
	l.retry = min(2*l.retry, l.w.opts.PollInterval)
}

func (w *Watcher) report(fp string, changed bool, err error) {
	if w.onCheck != nil {
		w.onCheck(fp, changed, err)
	}
}

// arm (re)starts the debounce timer: every relevant event pushes the look
// back, so it happens once the burst is over.
func (l *loop) arm(d time.Duration) {
	if l.timer == nil {
		l.timer = l.w.clock.NewTimer(d)
	} else {
		l.timer.Stop()
		l.timer.Reset(d)
	}
	l.timerC = l.timer.C()
}

func (l *loop) stopTimer() {
	if l.timer != nil {
		l.timer.Stop()
	}
}

// relevant says whether an event may mean new content. Pure attribute
// changes (touch, chmod) cannot; events in a parent directory matter only for
// the names on the path to the policy directory.
func (l *loop) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	if _, watched := l.filters[ev.Name]; watched {
		return true // a watched directory itself was removed or moved
	}
	names, ok := l.filters[filepath.Dir(ev.Name)]
	return !ok || names == nil || names[filepath.Base(ev.Name)]
}

// syncWatches makes the set of watched directories match watchTargets.
func (l *loop) syncWatches() {
	if l.notifier == nil {
		return
	}
	want := watchTargets(l.w.dir)
	have := map[string]bool{}
	for _, p := range l.notifier.WatchList() {
		have[p] = true
		if _, ok := want[p]; !ok {
			// Removing a watch on a directory already deleted fails; the
			// kernel dropped that watch already.
			_ = l.notifier.Remove(p)
		}
	}
	for p := range want {
		if have[p] {
			continue
		}
		err := l.notifier.Add(p)
		switch {
		case err == nil, errors.Is(err, fs.ErrNotExist):
			// Gone since we listed it: the event that removed it brings us back.
		case !l.warnedAdd:
			l.warnedAdd = true
			l.w.log.Warn("cannot watch part of the policy directory; relying on polling for it",
				"path", p, "pollInterval", l.w.opts.PollInterval, "error", err)
		default:
			l.w.log.Debug("cannot watch part of the policy directory", "path", p, "error", err)
		}
	}
	l.filters = want
}

// watchTargets lists the directories to watch for dir, each with the entry
// names that matter in it (nil: every name):
//   - the resolved directory and its subdirectories, symlinks followed and
//     dot-entries skipped like Fingerprint does; kubelet's "..data" swap
//     shows up here, in the directory itself;
//   - the directory holding each symlink met on the way to dir, for that
//     symlink's name: a git-sync swap replaces the link, which nothing inside
//     the old or new target sees;
//   - dir's parent, for dir's name, to see dir itself deleted and recreated.
func watchTargets(dir string) map[string]map[string]bool {
	want := map[string]map[string]bool{}
	addName := func(d, name string) {
		names, seen := want[d]
		if seen && names == nil {
			return
		}
		if !seen {
			names = map[string]bool{}
			want[d] = names
		}
		names[name] = true
	}
	// The parent resolved: watching through a symlink would watch whatever
	// it pointed to when the watch was added.
	parent := filepath.Dir(dir)
	if real, err := filepath.EvalSymlinks(parent); err == nil {
		parent = real
	}
	addName(parent, filepath.Base(dir))
	for _, link := range linkChain(dir) {
		addName(filepath.Dir(link), filepath.Base(link))
	}
	if root, err := filepath.EvalSymlinks(dir); err == nil {
		addTree(want, root)
	}
	return want
}

// addTree marks d and the directories below it as fully watched. Marked
// directories are not walked again, which also stops symlink cycles.
func addTree(want map[string]map[string]bool, d string) {
	if names, seen := want[d]; seen && names == nil {
		return
	}
	want[d] = nil
	entries, err := os.ReadDir(d)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(d, e.Name())
		switch {
		case e.IsDir():
			addTree(want, p)
		case e.Type()&fs.ModeSymlink != 0:
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				continue
			}
			if fi, err := os.Stat(real); err == nil && fi.IsDir() {
				addTree(want, real)
			}
		}
	}
}

// linkChain returns every symlink met while resolving the absolute path p,
// each named by its resolved location, in the order they are met. It is
// filepath.EvalSymlinks keeping a record; it stops where p stops existing.
func linkChain(p string) []string {
	const sep = string(filepath.Separator)
	var links []string
	vol := filepath.VolumeName(p)
	done := vol + sep    // resolved so far
	rest := p[len(vol):] // still to resolve
	for hops := 0; hops < 255; {
		rest = strings.TrimLeft(rest, sep)
		if rest == "" {
			break
		}
		comp, tail, _ := strings.Cut(rest, sep)
		rest = tail
		switch comp {
		case ".":
			continue
		case "..":
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, comp)
		fi, err := os.Lstat(next)
		if err != nil {
			break
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		hops++
		links = append(links, next)
		target, err := os.Readlink(next)
		if err != nil {
			break
		}
		if filepath.IsAbs(target) {
			v := filepath.VolumeName(target)
			done = v + sep
			target = target[len(v):]
		}
		rest = target + sep + rest
	}
	return links
}
