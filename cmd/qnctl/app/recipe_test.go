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

// README's walkthrough quotes what qnctl test says of a misspelt field in
// the walkthrough's first fixture case: the line it names is the line
// qnctl names.
func TestReadmeQuotesTheBrokenFixtureMessage(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(string(readme)), " ")
	m := regexp.MustCompile("`(my-policies/fixtures/ssh\\.yaml:\\d+: field objet not found in fixtureCase)`").FindStringSubmatch(flat)
	if m == nil {
		t.Fatal("README.md no longer quotes the broken fixture's message; update this test")
	}
	dir := filepath.Join(t.TempDir(), "my-policies")
	if err := os.CopyFS(dir, os.DirFS("../../../docs/examples/my-policies")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "fixtures", "ssh.yaml")
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(src), "\n  object:", "\n  objet:", 1)
	if broken == string(src) {
		t.Fatal("the first case of fixtures/ssh.yaml has no object: to misspell")
	}
	if err := os.WriteFile(file, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "test", dir)
	if code != exitBadInput || !strings.Contains(errOut, m[1]) {
		t.Errorf("qnctl test exited %d and printed\n%s%s\nREADME.md quotes %q", code, out, errOut, m[1])
	}
}

// The change-freeze example of docs/policies.md is a policy directory
// whose Rego tests and fixture cases pass, at the times they set, and
// that lints clean.
func TestTheChangeFreezeExamplePassesItsOwnTests(t *testing.T) {
	const dir = "../../../docs/examples/change-freeze"
	code, out, errOut := run(t, "", "test", dir)
	if code != exitOK || !strings.Contains(out, "6 Rego tests, 5 fixture cases: 11 passed, 0 failed") {
		t.Errorf("qnctl test %s exited %d\n%s%s", dir, code, out, errOut)
	}
	if code, out, errOut := run(t, "", "lint", "--strict", dir); code != exitOK {
		t.Errorf("qnctl lint --strict %s exited %d\n%s%s", dir, code, out, errOut)
	}
}
