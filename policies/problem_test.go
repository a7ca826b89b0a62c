package policies

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

// One load reports every problem of the directory, each at its file, line
// and field, so an author fixes them all in one round.
func TestLoadReportsEveryProblemInOnePass(t *testing.T) {
	cases := map[string]struct {
		files fstest.MapFS
		want  []Problem // File, Line, Column, Path and the start of Message
	}{
		"every mistake of the role table": {
			files: fstest.MapFS{
				"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE, PATCH]\n    packages: [p]\n    enforcement: audit\n    window: {limit: 0, period: 1m, key: pod}\n    limt: 3\n")},
				"p.rego":     {Data: []byte("package p\ndeny contains \"no\" if false\n")},
			},
			want: []Problem{
				{File: "roles.yaml", Line: 8, Path: "roles.r.limt", Message: "unknown field"},
				{File: "roles.yaml", Line: 4, Path: "roles.r.operations", Message: `"PATCH" is not an operation`},
				{File: "roles.yaml", Line: 6, Path: "roles.r.enforcement", Message: `"audit" is not an enforcement`},
				{File: "roles.yaml", Line: 7, Path: "roles.r.window.limit", Message: "0 admits nothing"},
				{File: "roles.yaml", Line: 7, Path: "roles.r.window.key", Message: `"pod" is not a window key`},
			},
		},
		"Rego errors in two files, and broken data beside them": {
			files: fstest.MapFS{
				"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n")},
				"p.rego":     {Data: []byte("package p\ndeny contains msg if {\n\tmsg := y\n}\n")},
				"q.rego":     {Data: []byte("package q\ndeny[msg] {\n\tmsg := 1\n}\n")},
				"data.json":  {Data: []byte("{\"roles\": {}, \"zones\": [\"a\"]}")},
				"data.yaml":  {Data: []byte("zones: [b]\n")},
			},
			want: []Problem{
				{File: "data.json", Line: 1, Message: `top-level key "roles" is reserved`},
				{File: "data.yaml", Line: 1, Message: `key "zones" is also defined by another data file`},
				{File: "q.rego", Line: 2, Column: 1, Message: "rego_parse_error: `if` keyword is required"},
				{File: "q.rego", Line: 2, Column: 1, Message: "rego_parse_error: `contains` keyword is required"},
			},
		},
		"compile errors in two modules that parse": {
			files: fstest.MapFS{
				"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n")},
				"p.rego":     {Data: []byte("package p\ndeny contains msg if {\n\tmsg := y\n}\n")},
				"q.rego":     {Data: []byte("package q\nwarn contains msg if {\n\tmsg := z\n}\n")},
			},
			want: []Problem{
				{File: "p.rego", Line: 3, Message: "rego_unsafe_var_error: var y is unsafe"},
				{File: "q.rego", Line: 3, Message: "rego_unsafe_var_error: var z is unsafe"},
			},
		},
		"packages the role table lists and no module declares": {
			files: fstest.MapFS{
				"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p, typo]\n  s:\n    operations: [CREATE]\n    packages: [other]\n")},
				"p.rego":     {Data: []byte("package p\ndeny contains \"no\" if false\n")},
			},
			want: []Problem{
				{File: "roles.yaml", Line: 5, Path: "roles.r.packages", Message: `package "typo" is not declared by any .rego file (known packages: p)`},
				{File: "roles.yaml", Line: 8, Path: "roles.s.packages", Message: `package "other" is not declared`},
			},
		},
		"every failing Rego test": {
			files: fstest.MapFS{
				"roles.yaml":  {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n")},
				"p.rego":      {Data: []byte("package p\ndeny contains \"no\" if false\n")},
				"p_test.rego": {Data: []byte("package p_test\ntest_a if false\ntest_b if true\ntest_c if data.p.deny[\"no\"]\n")},
			},
			want: []Problem{
				{File: "p_test.rego", Line: 2, Path: "p_test.test_a", Message: "test rule evaluated to false or undefined"},
				{File: "p_test.rego", Line: 4, Path: "p_test.test_c", Message: "test rule evaluated to false or undefined"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Load(context.Background(), tc.files, LoadOptions{})
			var got Problems
			if !errors.As(err, &got) {
				t.Fatalf("Load = %v, want Problems", err)
			}
			if len(got) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(got), len(tc.want), describe(got))
			}
			for _, w := range tc.want {
				if !has(got, w) {
					t.Errorf("no problem like %+v among:\n%s", w, describe(got))
				}
			}
			for _, p := range got {
				if strings.HasPrefix(p.Message, "rego_") && p.Hint == "" {
					t.Errorf("a Rego error without a hint: %+v", p)
				}
			}
		})
	}
}

func has(got Problems, w Problem) bool {
	for _, p := range got {
		if p.File == w.File && p.Line == w.Line && (w.Column == 0 || p.Column == w.Column) && p.Path == w.Path && strings.HasPrefix(p.Message, w.Message) {
			return true
		}
	}
	return false
}

func describe(ps Problems) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s:%d:%d %q %q\n", p.File, p.Line, p.Column, p.Path, p.Message)
	}
	return b.String()
}
