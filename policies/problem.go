package policies

import (
	"errors"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/rego"
)

// Problem is one thing wrong with a policy directory: where it is, what is
// wrong and how to fix it (internal/problem, the one shape every file
// reports its mistakes in).
type Problem = problem.Problem

// Problems are every problem one load found. As an error it is what Load
// returns when the directory cannot be served; errors.As finds it through
// the context LoadDir adds.
type Problems = problem.Problems

// regoProblems turns the errors of rego.Compile into problems, one per
// parse or compile error, with a hint by error code.
func regoProblems(err error) Problems {
	var errs ast.Errors
	if !errors.As(err, &errs) {
		return Problems{{File: ".", Message: err.Error()}}
	}
	ps := make(Problems, 0, len(errs))
	for _, e := range errs {
		p := &Problem{File: ".", Message: e.Message, Hint: regoHint(e)}
		if e.Code != "" {
			p.Message = e.Code + ": " + e.Message
		}
		if e.Location != nil {
			p.File, p.Line, p.Column = e.Location.File, e.Location.Row, e.Location.Col
		}
		ps = append(ps, p)
	}
	return ps
}

func regoHint(e *ast.Error) string {
	msg := e.Message
	switch e.Code {
	case ast.ParseErr:
		if strings.Contains(msg, "`if` keyword is required") || strings.Contains(msg, "`contains` keyword is required") {
			return "policies are Rego v1: write `deny contains msg if { ... }` (`opa fmt --v0-v1` rewrites a v0 file)"
		}
		return "fix the syntax at this position; policies are Rego v1"
	case ast.UnsafeVarErr:
		return "bind the variable before using it (`some x in ...`, `x := ...`) or read it from input or data"
	case ast.RecursionErr:
		return "a rule must not depend on itself; break the cycle"
	case ast.TypeErr:
		if strings.Contains(msg, "undefined function") {
			for _, b := range rego.NetworkBuiltins {
				if strings.Contains(msg, b) {
					return "network built-ins are off so a decision never waits on the network; pass --allow-network-builtins to qn-webhook and qnctl only if a policy must call " + b
				}
			}
			return "check the function's name and arity (built-ins: https://www.openpolicyagent.org/docs/policy-reference)"
		}
		if strings.Contains(msg, "undefined ref") {
			return "check the spelling of the rule, package or import this refers to"
		}
		return "the operand types do not fit this call or comparison"
	}
	return "`opa check` on the directory reports the same error"
}

// TestProblems are the failed Rego tests of results, each a problem at its
// test rule.
func TestProblems(results []rego.TestResult) Problems {
	var ps Problems
	for _, f := range rego.FailedTests(results) {
		ps = append(ps, &Problem{
			File: f.File, Line: f.Line,
			Path:    strings.TrimPrefix(f.Package, "data.") + "." + f.Name,
			Message: f.Failure,
			Hint:    "qn-webhook refuses a set whose Rego tests fail; fix the policy or the test (qnctl test shows every result)",
		})
	}
	return ps
}
