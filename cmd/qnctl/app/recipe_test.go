package app

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The policy-repository recipe as documented: README's starting point
// (cp -r rego/bundle my-policies), then each qnctl step of docs/policies.md's
// CI pipeline that needs only the directory (lint --strict, test), run on
// that copy. A new user's first pipeline must pass before they change a
// line; the bundled policies and the docs both feed this test.
func TestTheDocumentedPolicyPipelinePassesOnTheStartingPoint(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const start = "cp -r rego/bundle my-policies"
	if !strings.Contains(string(readme), start) {
		t.Fatalf("README.md no longer starts from %q; make this test copy what it says", start)
	}
	dir := filepath.Join(t.TempDir(), "my-policies")
	if err := os.CopyFS(dir, os.DirFS("../../../rego/bundle")); err != nil {
		t.Fatal(err)
	}

	policiesDoc, err := os.ReadFile("../../../docs/policies.md")
	if err != nil {
		t.Fatal(err)
	}
	steps := regexp.MustCompile(`(?m)^\s*- run: qnctl (lint|test) (.*)$`).FindAllStringSubmatch(string(policiesDoc), -1)
	seen := map[string]bool{}
	for _, step := range steps {
		line := step[2]
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if i := strings.Index(line, ">"); i >= 0 {
			line = line[:i] // the redirect is the shell's
		}
		args := []string{step[1]}
		for _, a := range strings.Fields(line) {
			if a == "./policies" {
				a = dir
			}
			args = append(args, a)
		}
		seen[step[1]] = true
		t.Run(strings.Join(append([]string{"qnctl"}, step[1], line), " "), func(t *testing.T) {
			code, out, errOut := run(t, "", args...)
			if code != exitOK {
				t.Errorf("qnctl %s exited %d on a copy of rego/bundle\n%s%s", strings.Join(args, " "), code, out, errOut)
			}
		})
	}
	if !seen["lint"] || !seen["test"] {
		t.Fatalf("docs/policies.md's pipeline runs %v; want qnctl lint and qnctl test among its steps", seen)
	}
}
