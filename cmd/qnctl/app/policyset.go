package app

import (
	"context"
	"fmt"
	"io"
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

// readsInventory says the set declares inventory kinds and its policies
// read them: judged without an inventory, those rules say nothing.
func (p *policySet) readsInventory() bool {
	return len(p.Set.InventoryKinds()) > 0 && p.Set.Compiled.InventoryReads().Any()
}

// inventoryFromCluster reads the set's inventory from the kubeconfig's
// cluster when it reads one and --inventory gave none: judging the
// cluster's stored objects, the policies read the cluster's inventory, as
// qn-webhook and qn-controller's audit do.
func (p *policySet) inventoryFromCluster(ctx context.Context, o clusterOptions) error {
	if p.Inventory != nil || !p.readsInventory() {
		return nil
	}
	cfg, err := o.restConfig("qnctl")
	if err != nil {
		return err
	}
	snap, err := inventory.List(ctx, cfg, p.Set.InventoryKinds(), p.Set.Compiled.InventoryReads())
	if err != nil {
		return fmt.Errorf("the inventory of %s (%s): %w", p.Source, cfg.Host, err)
	}
	p.Inventory = snap
	return nil
}

// warnWithoutInventory tells that rules reading data.inventory judge
// without one: an answer that looks clean may only be uninformed.
func (p *policySet) warnWithoutInventory(w io.Writer) {
	if p.Inventory == nil && p.readsInventory() {
		fmt.Fprintf(w, "qnctl: warning: %s declares an inventory (%s) its policies read, and none was given: those rules judge without it and refuse nothing; give --inventory FILE (kubectl get KINDS -A -o yaml) or judge the cluster\n", p.Source, p.rolesLine("inventory"))
	}
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
