package policies

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/quantumnode/qn-admission/internal/dirwatch"
	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/rego"
)

// BundledName names the set compiled into the binaries in logs, messages
// and reports, where a directory would be named.
const BundledName = "bundled"

// Source is where a program's policy set comes from: the set bundled in
// the binary, or a directory followed and hot-reloaded. Open picks one;
// every program uses either the same way: Load, build an Engine, Run, and
// report Status and ReloadState.
type Source interface {
	// Name is the directory as given, or BundledName.
	Name() string
	// FS holds the source's files (roles.yaml, *.rego, data), for tools
	// that read them besides loading, such as qnctl lint.
	FS() fs.FS
	// Load loads the first set. Unlike a reload, a failure here is an
	// error: there is no last good set to keep serving.
	Load(ctx context.Context) (*Set, error)
	// Run keeps engine serving the newest good set of the source until
	// ctx ends.
	Run(ctx context.Context, engine *Engine) error
	// Status says which revision is served and, when the last reload
	// failed, why a newer one is not: readiness detail.
	Status() string
	// ReloadState is what strict health judges: the served set, when it
	// was loaded, and since when (and why) newer content fails to load.
	ReloadState() health.ReloadState
}

// OpenOptions say where the policies come from and how they load.
type OpenOptions struct {
	// Dir is the policy directory (--policy-dir); empty means the set
	// bundled in the binary (rego.Bundled).
	Dir string
	// Load applies to the first load and to every reload.
	Load LoadOptions
	// Watch tunes how Dir is followed; the bundled set never changes.
	Watch dirwatch.Options
	// Metrics, when set, count loads and reloads.
	Metrics *Metrics
	// Logger receives reloads and their failures. Default slog.Default().
	Logger *slog.Logger
}

// Open returns the source of a program's policies: the bundled set when
// opts.Dir is empty, else the directory, followed from now on (a change
// landing during the first Load is still reloaded by Run). A directory that
// does not exist or is a file is an error that says so; what it holds is
// judged by Load.
func Open(opts OpenOptions) (Source, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Dir == "" {
		return &bundledSource{opts: opts}, nil
	}
	st, err := os.Stat(opts.Dir)
	if err != nil {
		if pe, ok := err.(*fs.PathError); ok {
			err = pe.Err
		}
		return nil, fmt.Errorf("policy directory %s: %w", opts.Dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("policy directory %s is a file; pass the directory that holds %s", opts.Dir, RolesFile)
	}
	return newReloader(opts), nil
}

// bundledSource is the policy set compiled into the binary: it loads once
// and never changes.
type bundledSource struct {
	opts OpenOptions
	// revision is written by Load, before Run, Status and ReloadState are
	// called.
	revision string
}

func (b *bundledSource) Name() string { return BundledName }

func (b *bundledSource) FS() fs.FS { return rego.Bundled() }

func (b *bundledSource) Load(ctx context.Context) (*Set, error) {
	set, err := Load(ctx, rego.Bundled(), b.opts.Load)
	if err != nil {
		return nil, fmt.Errorf("load bundled policies: %w", err)
	}
	b.revision = set.Revision
	b.opts.Metrics.Reloaded(set.Revision, nil)
	return set, nil
}

func (b *bundledSource) Run(ctx context.Context, _ *Engine) error {
	<-ctx.Done()
	return nil
}

func (b *bundledSource) Status() string {
	return "serving bundled policies " + b.revision
}

// ReloadState never fails and has no load time: the bundled set cannot
// break after it loaded, nor grow old.
func (b *bundledSource) ReloadState() health.ReloadState {
	return health.ReloadState{Revision: b.revision, LoadedAt: time.Time{}}
}

var _ Source = (*reloader)(nil)
