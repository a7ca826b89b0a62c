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

	"github.com/quantumnode/qn-admission/internal/filewatch"
)

// Defaults for Options, chosen for the server: kubelet and git-sync finish a
// swap in milliseconds, and a missed event costs at most one poll interval.
const (
	defaultDebounce     = 500 * time.Millisecond
	defaultPollInterval = 10 * time.Second
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
	// Include names the files whose content counts (FingerprintOf); a
	// change to any other file is no change. Default every file.
	Include Include
	// OnLook, when set, is told the outcome of every look at the
	// directory: the error when it could not be read (deleted, replaced by
	// a file, unreadable), nil when it could. A deleted directory calls no
	// onChange, so this is how the caller can report it.
	OnLook func(err error)
}

// Watcher reports content changes of one policy directory. Create it with
// New before loading the directory the first time, then call Run.
type Watcher struct {
	dir  string
	opts Options
	log  *slog.Logger

	// last is the fingerprint of the content the caller holds ("" when it
	// could not be taken). Only Run touches it after New.
	last string
	// fingerprints remembers the directory's listings between looks. Only
	// New and Run touch it.
	fingerprints *Fingerprinter
	// failing: the last look failed; logged once per streak.
	failing bool

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
		opts.Debounce = defaultDebounce
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = defaultPollInterval
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
		newNotifier: fsnotify.NewWatcher,
	}
	w.fingerprints = NewFingerprinter(opts.Include)
	w.last, _ = w.fingerprints.Fingerprint(dir) // a missing directory is "": any content is new
	return w
}

// Run watches the directory until ctx ends, then returns nil. After events
// have been quiet for the debounce, on every poll, and once at start, it
// fingerprints the directory and calls onChange only if the fingerprint
// differs from the one the caller last saw (the content at New, or at the
// last onChange): content the caller already holds is never reported. It
// never calls onChange twice at once: changes during a slow onChange are
// reported after it returns.
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
	return filewatch.Run(ctx, filewatch.Options{
		What:         "policy directory",
		Targets:      func() filewatch.Targets { return watchTargets(w.dir) },
		Look:         func(ctx context.Context) error { return w.look(ctx, onChange) },
		Debounce:     w.opts.Debounce,
		PollInterval: w.opts.PollInterval,
		Logger:       w.log,
		Clock:        w.opts.Clock,
		NewNotifier:  w.newNotifier,
		OnStart:      w.onStart,
	})
}

// look fingerprints the directory and reports a change to onChange.
func (w *Watcher) look(ctx context.Context, onChange func(context.Context)) error {
	fp, err := w.fingerprints.Fingerprint(w.dir)
	if err != nil {
		if !w.failing {
			w.log.Warn("cannot read the policy directory; keeping the current policies and retrying", "error", err)
			w.failing = true
		} else {
			w.log.Debug("policy directory still unreadable", "error", err)
		}
		w.report("", false, err)
		return err
	}
	if w.failing {
		w.log.Info("policy directory is readable again")
		w.failing = false
	}
	changed := fp != w.last
	if changed {
		w.log.Info("policy directory changed", "fingerprint", fp, "previous", w.last)
		w.last = fp
		onChange(ctx)
	}
	w.report(fp, changed, nil)
	return nil
}

func (w *Watcher) report(fp string, changed bool, err error) {
	if w.opts.OnLook != nil {
		w.opts.OnLook(err)
	}
	if w.onCheck != nil {
		w.onCheck(fp, changed, err)
	}
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
func watchTargets(dir string) filewatch.Targets {
	want := filewatch.Targets{}
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
func addTree(want filewatch.Targets, d string) {
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
