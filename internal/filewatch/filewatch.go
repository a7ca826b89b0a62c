// Package filewatch is the one file-watch loop of qn-admission, shared by
// the serving certificate (certs) and the policy directory
// (internal/dirwatch): file-system events on a set of directories,
// debounced, plus a poll as the safety net for lost events, each ending in
// a look at the files by the caller.
//
// Kubernetes updates Secret and ConfigMap volumes, and git-sync its
// checkout, by swapping a symlink: the files themselves are never written.
// So directories are watched, not files, and the caller says which ones
// before every look (Targets), so a swap that moves the content to a new
// directory moves the watches with it.
package filewatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// Targets maps each directory to watch to the entry names whose events
// matter in it; a nil set means every name.
type Targets map[string]map[string]bool

// Options configure Run. Look and Targets are required.
type Options struct {
	// What names the watched thing in log lines, e.g. "policy directory".
	What string
	// Targets lists the directories to watch. Run calls it at start and
	// before every look.
	Targets func() Targets
	// Look looks at the files and acts on a change. Run calls it once at
	// start (the files may have changed before the watches were in place),
	// after events have been quiet for Debounce, on every poll and after a
	// watch error. An error (files unreadable, half written) schedules
	// another look, with backoff from Debounce up to PollInterval; the last
	// good state is the caller's to keep, and so is logging the error.
	// Never called twice at once.
	Look func(ctx context.Context) error
	// Debounce is how long events must stay quiet before a look, so that a
	// burst (a symlink swap, a checkout, an editor's save) yields one look.
	// Default 100ms. Events that never stop still see a look every
	// PollInterval.
	Debounce time.Duration
	// PollInterval is how often Run looks whatever the events say.
	// Default 10s.
	PollInterval time.Duration
	// Logger receives warnings about watches that cannot be added.
	// Default slog.Default().
	Logger *slog.Logger
	// Clock makes the debounce and poll timers. Default the real clock.
	Clock clock.WithTicker

	// NewNotifier replaces fsnotify.NewWatcher, so tests can make watching
	// fail and see Run poll instead.
	NewNotifier func() (*fsnotify.Watcher, error)
	// OnStart, when set, is called once watches are in place and the first
	// look is done, so tests wait for it instead of sleeping.
	OnStart func()
}

// Run watches and looks until ctx ends, then returns nil. Watching is best
// effort: when events are unavailable (inotify limits are per user and
// often exhausted on busy nodes) it logs a warning and polls.
func Run(ctx context.Context, o Options) error {
	if o.Look == nil || o.Targets == nil {
		return errors.New("filewatch: Run needs Look and Targets")
	}
	if o.Debounce <= 0 {
		o.Debounce = 100 * time.Millisecond
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.NewNotifier == nil {
		o.NewNotifier = fsnotify.NewWatcher
	}

	l := &loop{o: o, retry: o.Debounce}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if n, err := o.NewNotifier(); err != nil {
		o.Logger.Warn(fmt.Sprintf("cannot watch the %s for changes; polling only", o.What),
			"pollInterval", o.PollInterval, "error", err)
	} else {
		defer n.Close()
		l.notifier = n
		events, errs = n.Events, n.Errors
	}
	poll := o.Clock.NewTicker(o.PollInterval)
	defer poll.Stop()
	defer l.stopTimer()
	l.look(ctx)
	if o.OnStart != nil {
		o.OnStart()
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
				l.arm(o.Debounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// Typically an overflowed queue: events were dropped, so look
			// rather than trust that nothing happened.
			o.Logger.Warn(fmt.Sprintf("watching the %s reported an error", o.What), "error", err)
			l.arm(o.Debounce)
		case <-l.timerC:
			l.timerC = nil
			l.look(ctx)
		case <-poll.C():
			l.look(ctx)
		}
	}
}

// loop is the state of one Run. Everything here runs on Run's goroutine.
type loop struct {
	o        Options
	notifier *fsnotify.Watcher // nil when polling only
	targets  Targets
	// warnedAdd: a watch that cannot be added is a warning once, then debug.
	warnedAdd bool

	timer  clock.Timer
	timerC <-chan time.Time
	retry  time.Duration // the delay before the next look after a failed one
}

func (l *loop) look(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	// Watches first: a swap leaves the old target gone and the new one
	// unwatched.
	l.syncWatches()
	if err := l.o.Look(ctx); err != nil {
		l.arm(l.retry)
		l.retry = min(2*l.retry, l.o.PollInterval)
		return
	}
	l.retry = l.o.Debounce
}

// arm (re)starts the debounce timer: every relevant event pushes the look
// back, so it happens once the burst is over.
func (l *loop) arm(d time.Duration) {
	if l.timer == nil {
		l.timer = l.o.Clock.NewTimer(d)
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
// changes (touch, chmod) cannot; in a directory watched for some names
// only, only those names matter.
func (l *loop) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	if _, watched := l.targets[ev.Name]; watched {
		return true // a watched directory itself was removed or moved
	}
	names, ok := l.targets[filepath.Dir(ev.Name)]
	return !ok || names == nil || names[filepath.Base(ev.Name)]
}

// syncWatches makes the watched directories those Targets lists now.
func (l *loop) syncWatches() {
	want := l.o.Targets()
	l.targets = want
	if l.notifier == nil {
		return
	}
	have := map[string]bool{}
	for _, p := range l.notifier.WatchList() {
		have[p] = true
		if _, ok := want[p]; !ok {
			// Removing the watch of a directory already deleted fails; the
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
			// Gone since it was listed: the event that removed it, or the
			// next poll, brings us back.
		case !l.warnedAdd:
			l.warnedAdd = true
			l.o.Logger.Warn(fmt.Sprintf("cannot watch part of the %s; relying on polling for it", l.o.What),
				"path", p, "pollInterval", l.o.PollInterval, "error", err)
		default:
			l.o.Logger.Debug(fmt.Sprintf("cannot watch part of the %s", l.o.What), "path", p, "error", err)
		}
	}
}
