package app

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/inventory"
)

// policySet is a loaded policy directory and where it came from.
type policySet struct {
	// Source is the directory as given, or "bundled".
	Source string
	Set    *policies.Set
	// Inventory is --inventory's snapshot, pruned to what the set reads;
	// nil without it.
	Inventory policies.Inventory
}

// loadOptions are the server's load options for these command-line options.
func (o *commonOptions) loadOptions(skipTests bool) policies.LoadOptions {
	return policies.LoadOptions{
		EvalTimeout:  o.PolicyEvalTimeout,
		AllowNetwork: o.AllowNetworkBuiltins,
		SkipTests:    skipTests,
	}
}

// openPolicies opens a policy directory as qn-webhook does
// (policies.Open), or the bundled policies when dir is empty.
func openPolicies(dir string, o *commonOptions, skipTests bool) (policies.Source, error) {
	return policies.Open(policies.OpenOptions{Dir: dir, Load: o.loadOptions(skipTests), Logger: slog.New(slog.DiscardHandler)})
}

// loadPolicies loads a policy directory exactly as qn-webhook does. With
// skipTests the Rego unit tests are left to the caller.
func loadPolicies(ctx context.Context, dir string, o *commonOptions, skipTests bool) (*policySet, error) {
	source, err := openPolicies(dir, o, skipTests)
	if err != nil {
		return nil, err
	}
	set, err := source.Load(ctx)
	if err != nil {
		return nil, err
	}
	p := &policySet{Source: source.Name(), Set: set}
	if o.Inventory != "" {
		snap, err := inventory.LoadSnapshot(o.Inventory, set.Compiled.InventoryReads())
		if err != nil {
			return nil, &exitError{code: exitBadInput, err: fmt.Errorf("--inventory: %w", err)}
		}
		p.Inventory = snap
	}
	return p, nil
}

// rolesLine is "roles.yaml:N" for a dotted path of the role table.
func (p *policySet) rolesLine(path string) string {
	if n := p.Set.Roles.Line(path); n > 0 {
		return fmt.Sprintf("%s:%d", policies.RolesFile, n)
	}
	return policies.RolesFile
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// relPath shows path relative to the working directory when that is shorter.
func relPath(path string) string {
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, path); err == nil && len(rel) < len(path) {
			return rel
		}
	}
	return path
}
