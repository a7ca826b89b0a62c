package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/quantumnode/qn-admission/test/harness"
)

// Every binary names a flag it does not have on stderr and exits non-zero,
// so a typo in the chart's args is a crash loop whose log says why.
func TestEveryBinaryNamesAnUnknownFlag(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string // each on stderr
		code int
	}{
		"qn-webhook":    {args: []string{"--bogus"}, want: []string{"unknown flag: --bogus", "Usage of qn-webhook"}, code: 2},
		"qn-controller": {args: []string{"--bogus"}, want: []string{"unknown flag: --bogus", "Usage of qn-controller"}, code: 2},
		"qnctl":         {args: []string{"--bogus"}, want: []string{"qnctl: unknown flag: --bogus", "Run 'qnctl --help' for usage."}, code: 2},
	}
	strays := map[string][]string{
		"qn-webhook":    {"policy-dir=/policies"},
		"qn-controller": {"policy-dir=/policies"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			bin := binary
			if name != "qn-webhook" {
				var err error
				if bin, err = harness.Build(context.Background(), t.TempDir(), "./cmd/"+name); err != nil {
					t.Fatal(err)
				}
			}
			run := func(args []string) (int, string) {
				var stderr strings.Builder
				cmd := exec.Command(bin, args...)
				cmd.Stderr = &stderr
				err := cmd.Run()
				var exit *exec.ExitError
				if !errors.As(err, &exit) {
					t.Fatalf("%s %v: %v, want it to exit with an error", name, args, err)
				}
				return exit.ExitCode(), stderr.String()
			}
			code, stderr := run(c.args)
			if code != c.code {
				t.Errorf("%s %v exited %d, want %d; stderr:\n%s", name, c.args, code, c.code, stderr)
			}
			for _, want := range c.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("%s %v: stderr does not say %q:\n%s", name, c.args, want, stderr)
				}
			}
			// A setting without its dashes is not silently ignored either.
			if args, ok := strays[name]; ok {
				code, stderr := run(args)
				want := name + `: unexpected argument "policy-dir=/policies": every setting is a --flag`
				if code != 2 || !strings.Contains(stderr, want) {
					t.Errorf("%s %v exited %d, want 2 and %q; stderr:\n%s", name, args, code, want, stderr)
				}
			}
		})
	}
}
