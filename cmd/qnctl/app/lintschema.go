package app

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/config/crd"
	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// inputSchema is what lint type-checks policies against: the schemas and
// a short name of the input's for the summary.
type inputSchema struct {
	set  *ast.SchemaSet
	name string
}

// schemaInputKey is where a --schema directory's input.json sits in the
// schema set (schema.input), as `opa check --schema DIR` puts it.
var schemaInputKey = ast.MustParseRef("schema.input")

// loadInputSchema builds the schema set: the input schema generated from
// the QuantumNode CRD and the engine's input, or what path gives. A file
// replaces the input schema; a directory's files are the schemas METADATA
// annotations name (schema.<path>, as opa check --schema), and its
// input.json, when there is one, replaces the input schema.
func loadInputSchema(path string) (*inputSchema, error) {
	generated, err := generatedInputSchema()
	if err != nil {
		return nil, err
	}
	generatedName := qnv1alpha1.Kind + " " + qnv1alpha1.GroupVersion.String()
	if path == "" {
		set := ast.NewSchemaSet()
		set.Put(ast.SchemaRootRef, generated)
		return &inputSchema{set: set, name: generatedName}, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("--schema %s: %w", path, unwrapPathError(err))
	}
	set, err := loader.Schemas(path)
	if err != nil {
		return nil, fmt.Errorf("--schema %s: %w", path, err)
	}
	name := path
	if set.Get(ast.SchemaRootRef) == nil {
		if in := set.Get(schemaInputKey); in != nil {
			set.Put(ast.SchemaRootRef, in)
		} else {
			set.Put(ast.SchemaRootRef, generated)
			name = generatedName + " and " + path
		}
	}
	// The compiler reads the input schema before any policy: one it cannot
	// read is the flag's mistake, not the policies'.
	if errs := rego.TypeCheck(nil, set, rego.CompileOptions{}); len(errs) > 0 {
		return nil, fmt.Errorf("--schema %s: %w", path, errs)
	}
	return &inputSchema{set: set, name: name}, nil
}

// generatedInputSchema is policies.InputSchema with request.object the
// QuantumNode of the CRD the chart installs, at the version the webhook is
// registered for (requests for another are converted to it).
func generatedInputSchema() (map[string]any, error) {
	def, err := crd.QuantumNode()
	if err != nil {
		return nil, err
	}
	openAPI, err := crd.OpenAPIV3Schema(def, qnv1alpha1.GroupVersion.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", crd.FileName, err)
	}
	return policies.InputSchema(policies.ObjectSchema(openAPI)), nil
}

// lintInputSchema type-checks the policies against the input's schema and
// warns of every ref that cannot exist in it (a misspelt path) and every
// value of the wrong type given to a built-in. Warnings, not errors: the
// set loads and qn-webhook serves it (a misspelt path is just undefined),
// like the other warnings it is what cannot work as meant; --strict fails
// on them.
func lintInputSchema(r *lintReport, modules []rego.Module, schema *inputSchema, opts *commonOptions) {
	errs := rego.TypeCheck(modules, schema.set, rego.CompileOptions{AllowNetwork: opts.AllowNetworkBuiltins})
	for _, e := range errs {
		p := problem.Problem{File: ".", Message: schemaMessage(e), Hint: schemaHint(e)}
		if e.Location != nil {
			p.File, p.Line, p.Column = e.Location.File, e.Location.Row, e.Location.Col
		}
		r.add(lintProblem{Problem: p, Severity: severityWarning})
	}
}

// schemaHint says how to fix a type error.
func schemaHint(e *ast.Error) string {
	switch {
	case strings.HasPrefix(e.Message, "undefined schema"):
		return "pass --schema DIR with the schema the annotation names (schema.pod is DIR/pod.json)"
	case e.Code == ast.ParseErr:
		return "fix the METADATA annotation (lint reads annotations for their schemas; qn-webhook ignores them)"
	}
	return "fix the path or the type (qnctl lint --print-schema shows the input's schema); a rule judging another kind declares its schema in a METADATA annotation (docs/policies.md, Type checking)"
}

// schemaMessage says what a type error found and what the schema has
// there: "undefined ref: input.request.object.spec.servcies;
// input.request.object.spec has: hardware, services".
func schemaMessage(e *ast.Error) string {
	switch d := e.Details.(type) {
	case *ast.RefErrInvalidDetail:
		msg := "undefined ref: " + d.Ref.String()
		parent := d.Ref[:d.Pos].String()
		switch {
		case len(d.OneOf) > 0:
			keys := make([]string, 0, len(d.OneOf))
			for _, k := range d.OneOf {
				if s, ok := k.(ast.String); ok {
					keys = append(keys, string(s))
				} else {
					keys = append(keys, k.String())
				}
			}
			sort.Strings(keys)
			return msg + "; " + parent + " has: " + strings.Join(keys, ", ")
		case d.Want != nil:
			return fmt.Sprintf("%s; %s is indexed by %v", msg, parent, d.Want)
		}
		return msg
	case *ast.RefErrUnsupportedDetail:
		return fmt.Sprintf("undefined ref: %s; %s is %v", d.Ref, d.Ref[:d.Pos+1], d.Have)
	case nil:
		return e.Code + ": " + e.Message
	default:
		return e.Code + ": " + e.Message + " (" + strings.Join(d.Lines(), "; ") + ")"
	}
}
