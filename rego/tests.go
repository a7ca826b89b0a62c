package rego

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestResult is the outcome of one Rego unit test (a rule named test_*).
type TestResult struct {
	Package  string
	Name     string
	Location string // file:line of the test rule
	File     string
	Line     int
	Passed   bool
	Skipped  bool
	// Failure says why a test did not pass: false, undefined or an error.
	Failure  string
	Duration time.Duration
}

// RunTests runs every test_* rule in the set's modules, with the same
// capabilities and data the policies are served with (the semantics of
// `opa test`). The results are sorted by package and name.
func (c *Compiled) RunTests(ctx context.Context) ([]TestResult, error) {
	compiler := ast.NewCompiler().WithCapabilities(Capabilities(c.opts))
	txn, err := c.store.NewTransaction(ctx, storage.TransactionParams{})
	if err != nil {
		return nil, fmt.Errorf("open data transaction for tests: %w", err)
	}
	defer c.store.Abort(ctx, txn)
	ch, err := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(c.store).
		SetModules(c.modules).
		SetTimeout(10*time.Second).
		RaiseBuiltinErrors(true).
		RunTests(ctx, txn)
	if err != nil {
		return nil, fmt.Errorf("run rego tests: %w", err)
	}
	var out []TestResult
	for r := range ch {
		tr := TestResult{
			Package:  r.Package,
			Name:     r.Name,
			Passed:   r.Pass(),
			Skipped:  r.Skip,
			Duration: r.Duration,
		}
		if r.Location != nil {
			tr.Location = fmt.Sprintf("%s:%d", r.Location.File, r.Location.Row)
			tr.File, tr.Line = r.Location.File, r.Location.Row
		}
		switch {
		case r.Error != nil:
			tr.Failure = r.Error.Error()
		case r.Fail:
			tr.Failure = "test rule evaluated to false or undefined"
		}
		out = append(out, tr)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Package != out[j].Package {
			return out[i].Package < out[j].Package
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// FailedTests returns the results that did not pass and were not skipped.
func FailedTests(results []TestResult) []TestResult {
	var failed []TestResult
	for _, r := range results {
		if !r.Passed && !r.Skipped {
			failed = append(failed, r)
		}
	}
	return failed
}
