package problem

import (
	"errors"
	"fmt"
	"testing"
)

func TestProblemsReadAsErrors(t *testing.T) {
	one := Problems{{File: "roles.yaml", Line: 4, Path: "roles.r.operations", Message: `"PATCH" is not an operation`, Hint: "use CREATE"}}
	if got, want := one.Error(), `roles.yaml:4: roles.r.operations: "PATCH" is not an operation`; got != want {
		t.Errorf("one problem reads %q, want %q", got, want)
	}
	two := append(one, &Problem{File: ".", Message: "no .rego files"})
	if got, want := two.Error(), `2 problems: roles.yaml:4: roles.r.operations: "PATCH" is not an operation; .: no .rego files`; got != want {
		t.Errorf("two problems read %q, want %q", got, want)
	}
	if Problems(nil).Err() != nil || two.Err() == nil {
		t.Error("Err is nil exactly when there are no problems")
	}
	wrapped := fmt.Errorf("policy directory /p: %w", two)
	if ps := Of(wrapped, "."); len(ps) != 2 {
		t.Errorf("Of a wrapped list = %v", ps)
	}
	if ps := Of(fmt.Errorf("fixtures: %w", one[0]), "."); len(ps) != 1 || ps[0] != one[0] {
		t.Errorf("Of a wrapped problem = %v", ps)
	}
	if ps := Of(errors.New("disk on fire"), "."); len(ps) != 1 || ps[0].File != "." || ps[0].Message != "disk on fire" {
		t.Errorf("Of a plain error = %+v", ps)
	}
}

func TestFromYAMLReadsTheLine(t *testing.T) {
	cases := map[string]struct {
		err  string
		want Problem
	}{
		"a syntax error at a line": {
			"yaml: line 3: did not find expected key", Problem{File: "f.yaml", Line: 3, Message: "did not find expected key"}},
		"several unmarshal errors, joined, at the first one's line": {
			"yaml: unmarshal errors:\n  line 7: field objet not found in type app.fixtureCase\n  line 9: field x not found",
			Problem{File: "f.yaml", Line: 7, Message: "field objet not found in type app.fixtureCase; line 9: field x not found"}},
		"no line": {"yaml: mapping values are not allowed in this context", Problem{File: "f.yaml", Message: "mapping values are not allowed in this context"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := FromYAML("f.yaml", errors.New(c.err)); *got != c.want {
				t.Errorf("FromYAML = %+v, want %+v", *got, c.want)
			}
		})
	}
}
