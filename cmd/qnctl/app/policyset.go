package app

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// bundledName names the policies compiled into qnctl (and qn-webhook) in
// messages and reports.
const bundledName = "bundled"

// policySet is a loaded policy directory and what explanations need
// besides the Set: where it came from and the role table's source for
// line numbers.
type policySet struct {
	// Source is the directory as given, or "bundled".
	Source   string
	Set      *policies.Set
	RolesSrc []byte
}

// loadOptions are the server's load options for these command-line options.
func (o *commonOptions) loadOptions(skipTests bool) policies.LoadOptions {
	return policies.LoadOptions{
		EvalTimeout:  o.PolicyEvalTimeout,
		AllowNetwork: o.AllowNetworkBuiltins,
		SkipTests:    skipTests,
	}
}

// policyFS opens a policy directory, or the bundled policies when dir is
// empty. A missing or unreadable directory is an error that says so.
func policyFS(dir string) (fs.FS, string, error) {
	if dir == "" {
		return rego.Bundled(), bundledName, nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, dir, fmt.Errorf("policy directory %s: %w", dir, unwrapPathError(err))
	}
	if !st.IsDir() {
		return nil, dir, fmt.Errorf("policy directory %s is a file; pass the directory that holds %s", dir, policies.RolesFile)
	}
	return os.DirFS(dir), dir, nil
}

// loadPolicies loads a policy directory exactly as qn-webhook does
// (policies.LoadDir for a directory, policies.Load for the bundled set).
// With skipTests the Rego unit tests are left to the caller.
func loadPolicies(ctx context.Context, dir string, o *commonOptions, skipTests bool) (*policySet, error) {
	fsys, source, err := policyFS(dir)
	if err != nil {
		return nil, err
	}
	var set *policies.Set
	if dir == "" {
		set, err = policies.Load(ctx, fsys, o.loadOptions(skipTests))
		if err != nil {
			err = fmt.Errorf("bundled policies: %w", err)
		}
	} else {
		set, err = policies.LoadDir(ctx, dir, o.loadOptions(skipTests))
	}
	if err != nil {
		return nil, err
	}
	src, _ := fs.ReadFile(fsys, policies.RolesFile)
	return &policySet{Source: source, Set: set, RolesSrc: src}, nil
}

// rolesLine is "roles.yaml:N" for a dotted path of the role table.
func (p *policySet) rolesLine(path string) string {
	if n := policies.RoleTableLine(p.RolesSrc, path); n > 0 {
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
