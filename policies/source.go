package policies

import (
	"context"
	"fmt"

	"github.com/quantumnode/qn-admission/rego"
)

// Source is where the served policy set comes from: a directory that is
// followed and hot-reloaded (Reloader), or the set bundled in the binary
// (Bundled), whose watcher never fires. A program serves either the same
// way: Load, build an Engine, Run, and report Status.
type Source interface {
	// Load loads the first set. Unlike a reload, a failure here is an
	// error: there is no last good set to keep serving.
	Load(ctx context.Context) (*Set, error)
	// Run keeps engine serving the newest good set of the source until
	// ctx ends.
	Run(ctx context.Context, engine *Engine) error
	// Status says which revision is served and, when the last reload
	// failed, why a newer one is not: readiness detail.
	Status() string
}

// Bundled is the policy set compiled into the binary (rego.Bundled) as a
// Source: it loads once and never changes.
func Bundled(opts LoadOptions) Source {
	return &bundledSource{opts: opts}
}

type bundledSource struct {
	opts LoadOptions
	// revision is written by Load, before Run and Status are called.
	revision string
}

func (b *bundledSource) Load(ctx context.Context) (*Set, error) {
	set, err := Load(ctx, rego.Bundled(), b.opts)
	if err != nil {
		return nil, fmt.Errorf("load bundled policies: %w", err)
	}
	b.revision = set.Revision
	return set, nil
}

func (b *bundledSource) Run(ctx context.Context, _ *Engine) error {
	<-ctx.Done()
	return nil
}

func (b *bundledSource) Status() string {
	return "serving bundled policies " + b.revision
}

var _ Source = (*Reloader)(nil)
