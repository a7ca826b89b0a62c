package app

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestHelpShowsExamplesForEveryCommand(t *testing.T) {
	for _, cmd := range []string{"eval", "test", "lint", "version"} {
		t.Run(cmd, func(t *testing.T) {
			code, out, _ := run(t, "", cmd, "--help")
			if code != exitOK || !strings.Contains(out, "Examples:\n") || !strings.Contains(out, "qnctl "+cmd) {
				t.Errorf("exit %d, help lacks examples:\n%s", code, out)
			}
		})
	}
	code, out, _ := run(t, "", "--help")
	if code != exitOK || !strings.Contains(out, "Exit codes: 0 allowed") || !strings.Contains(out, "completion") {
		t.Errorf("root help: exit %d\n%s", code, out)
	}
}

func TestUsageErrorsExitWith2(t *testing.T) {
	for name, args := range map[string][]string{
		"an unknown command":          {"evaluate"},
		"too many directories":        {"test", "a", "b"},
		"an unknown flag on the root": {"--nope"},
		"version with an argument":    {"version", "x"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errOut := run(t, "", args...)
			if code != exitBadInput || !strings.Contains(errOut, "qnctl: ") || !strings.Contains(errOut, "--help' for usage") {
				t.Errorf("exit %d, stderr:\n%s", code, errOut)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "", "version")
	if code != exitOK || !strings.HasPrefix(out, "qnctl ") || !strings.Contains(out, "OPA v1.") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	code, flagOut, _ := run(t, "", "--version")
	if code != exitOK || flagOut != out {
		t.Errorf("qnctl --version: exit %d, %q; want qnctl version's %q", code, flagOut, out)
	}
	code, out, _ = run(t, "", "version", "-o", "json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil || v.Version == "" || v.Go == "" || v.Platform == "" || v.OPA == "" {
		t.Errorf("exit %d, %v: %s", code, err, out)
	}
}

func TestShellCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		code, out, errOut := run(t, "", "completion", shell)
		if code != exitOK || !strings.Contains(out, "qnctl") {
			t.Errorf("%s: exit %d %s", shell, code, errOut)
		}
	}
	// Dynamic completion: cobra's hidden __complete command, as the shells call it.
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"--role completes from the role table of --policy-dir": {[]string{"eval", "x.yaml", "--policy-dir", testPolicies, "--role", ""}, []string{"standard", "strict"}},
		"--role completes from the bundled role table":         {[]string{"eval", "x.yaml", "--role", ""}, []string{"batch", "default", "realtime"}},
		"--webhook completes its modes":                        {[]string{"eval", "x.yaml", "--webhook", ""}, []string{"both", "validate", "mutate"}},
		"--output of test completes junit":                     {[]string{"test", "--output", ""}, []string{"junit"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, out, _ := run(t, "", append([]string{"__complete"}, tc.args...)...)
			for _, w := range tc.want {
				if !strings.Contains(out, w+"\n") {
					t.Errorf("completion lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
