package rego

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Without compiles the set again, with the same data and options, leaving
// out every rule definition drop selects. drop sees the rules as parsed
// (their Location names file, row and column). The background audit uses
// it to judge stored objects without the rules that read the requester:
// the same modules, minus those definitions, through the same OPA.
func (c *Compiled) Without(drop func(*ast.Rule) bool) (*Compiled, error) {
	parsed := make(map[string]*ast.Module, len(c.modules))
	for path, mod := range c.modules {
		m := mod.Copy()
		kept := m.Rules[:0]
		for _, r := range m.Rules {
			if !drop(r) {
				kept = append(kept, r)
			}
		}
		m.Rules = kept
		parsed[path] = m
	}
	compiler := ast.NewCompiler().
		WithCapabilities(Capabilities(c.opts)).
		WithEnablePrintStatements(false)
	if compiler.Compile(parsed); compiler.Failed() {
		return nil, fmt.Errorf("compile policies without the rules the audit skips: %w", compiler.Errors)
	}
	return &Compiled{compiler: compiler, store: c.store, modules: parsed, packages: c.packages, opts: c.opts, reads: analyseInputReads(compiler.Modules), data: c.data}, nil
}

// DefinesRule reports whether package pkg defines a rule named name.
func (c *Compiled) DefinesRule(pkg, name string) bool { return c.definesRule(pkg, name) }
