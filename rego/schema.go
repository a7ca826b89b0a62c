package rego

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// TypeCheck compiles modules as Compile does, with OPA's type checker
// reading the JSON schemas of the input and data documents in schemas (as
// `opa check --schema` does), and returns every error: a ref the schema
// says cannot exist (a misspelt input path), a value of the wrong type
// given to a built-in. The modules' METADATA annotations are read, so a
// rule may declare the schema of what it reads (`schemas:` in OPA's
// annotations); Compile, as qn-webhook serves a set, ignores them.
func TypeCheck(modules []Module, schemas *ast.SchemaSet, opts CompileOptions) ast.Errors {
	parsed, errs := parseModules(modules, ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
	if len(errs) > 0 {
		return errs
	}
	compiler := ast.NewCompiler().
		WithCapabilities(Capabilities(opts)).
		WithEnablePrintStatements(false).
		WithSchemas(schemas).
		WithUseTypeCheckAnnotations(true).
		SetErrorLimit(0)
	compiler.Compile(parsed)
	return compiler.Errors
}
