// Package rego wraps the OPA v1 Go API for qn-admission: it compiles a policy
// set once, with the network built-ins removed, and prepares one query per
// role that returns the role's deny, warn and patch sets in a single
// evaluation. It knows nothing of HTTP or of roles beyond a list of packages.
package rego

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// Module is one Rego source file of a policy set.
type Module struct {
	// Path names the file in error messages ("quantumnode.rego").
	Path   string
	Source string
}

// CompileOptions tune how a policy set is compiled.
type CompileOptions struct {
	// AllowNetwork keeps http.send, net.lookup_ip_addr and opa.runtime
	// available. Off by default: an admission decision must not wait on the
	// network, and a policy that calls them fails to compile instead.
	AllowNetwork bool
}

// NetworkBuiltins are removed from the capabilities unless AllowNetwork is
// set: a policy that calls one fails to compile.
var NetworkBuiltins = []string{"http.send", "net.lookup_ip_addr", "opa.runtime"}

// Compiled is a whole policy set compiled together: every module and the data
// document. It is immutable and safe for concurrent use.
type Compiled struct {
	compiler *ast.Compiler
	store    storage.Store
	modules  map[string]*ast.Module
	packages map[string]bool
	opts     CompileOptions
	reads    *inputReads
	// data is the data document as a Rego value, for planned evaluation.
	data ast.Value
	// inventory is what the inventory's evaluations and analyses keep
	// (inventory.go).
	inventory compiledInventory
	// evalModeMu serializes what flips the compiler's evaluation mode:
	// planning a query (rego sets the IR mode on the shared compiler) and
	// preparing a topdown query after it.
	evalModeMu sync.Mutex
}

// Capabilities returns the OPA capabilities a policy set is compiled against.
func Capabilities(opts CompileOptions) *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	if opts.AllowNetwork {
		return caps
	}
	kept := caps.Builtins[:0:0]
	for _, b := range caps.Builtins {
		if !slices.Contains(NetworkBuiltins, b.Name) {
			kept = append(kept, b)
		}
	}
	caps.Builtins = kept
	caps.AllowNet = []string{}
	return caps
}

// Compile parses and compiles modules together with data (the document
// policies read as data). The error wraps OPA's ast.Errors, each with its
// file, line and column: every module's parse errors, or else the
// compiler's errors.
func Compile(modules []Module, data map[string]any, opts CompileOptions) (*Compiled, error) {
	parsed, errs := parseModules(modules, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if len(errs) > 0 {
		return nil, fmt.Errorf("parse policies: %w", errs)
	}
	compiler := ast.NewCompiler().
		WithCapabilities(Capabilities(opts)).
		WithEnablePrintStatements(false)
	if compiler.Compile(parsed); compiler.Failed() {
		return nil, fmt.Errorf("compile policies: %w", compiler.Errors)
	}
	if data == nil {
		data = map[string]any{}
	}
	if err := reserveInventory(parsed, data); err != nil {
		return nil, fmt.Errorf("compile policies: %w", err)
	}
	dataValue, err := ast.InterfaceToValue(data)
	if err != nil {
		return nil, fmt.Errorf("policy data: %w", err)
	}
	packages := map[string]bool{}
	for _, mod := range parsed {
		packages[PackageName(mod)] = true
	}
	return &Compiled{
		compiler: compiler,
		store:    inventoryStore{inmem.NewFromObject(data)},
		modules:  parsed,
		packages: packages,
		opts:     opts,
		reads:    analyseInputReads(compiler.Modules),
		data:     dataValue,
	}, nil
}

// parseModules parses every module, and reports every module's errors.
func parseModules(modules []Module, opts ast.ParserOptions) (map[string]*ast.Module, ast.Errors) {
	parsed := make(map[string]*ast.Module, len(modules))
	var errs ast.Errors
	for _, m := range modules {
		mod, err := ast.ParseModuleWithOpts(m.Path, m.Source, opts)
		if err != nil {
			var parseErrs ast.Errors
			if !errors.As(err, &parseErrs) {
				parseErrs = ast.Errors{ast.NewError(ast.ParseErr, &ast.Location{File: m.Path}, "%v", err)}
			}
			errs = append(errs, parseErrs...)
			continue
		}
		parsed[m.Path] = mod
	}
	return parsed, errs
}

// PackageName is a module's package as users write it in roles.yaml
// ("qn.quantumnode"), without the leading "data.".
func PackageName(mod *ast.Module) string {
	return strings.TrimPrefix(mod.Package.Path.String(), "data.")
}

// HasPackage reports whether any module of the set declares package name.
func (c *Compiled) HasPackage(name string) bool { return c.packages[name] }

// Packages lists the set's packages, sorted.
func (c *Compiled) Packages() []string {
	out := make([]string, 0, len(c.packages))
	for p := range c.packages {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// MayReadInput reports whether any policy of the set may read the input
// document at path (input.request.object.metadata.managedFields is
// ["request", "object", "metadata", "managedFields"]) or anything under it.
// False means every policy's answer is the same without it.
func (c *Compiled) MayReadInput(path ...string) bool { return c.reads.mayRead(path) }

// InputReadsBelow lists what any policy of the set may read below path,
// each relative to path: a policy reading input.request.object.spec.x
// gives ["spec", "x"] below ["request", "object"], and one reading path
// itself, or anything above it (the whole object passed to a function,
// walk(input), a variable key), gives the empty path: everything. None
// means nothing below path is read.
func (c *Compiled) InputReadsBelow(path ...string) [][]string { return c.reads.below(path) }

// Store exposes the data document, for the Rego test runner.
func (c *Compiled) Store() storage.Store { return c.store }

// Modules exposes the parsed modules keyed by file path.
func (c *Compiled) Modules() map[string]*ast.Module { return c.modules }
