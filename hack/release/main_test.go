package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every mistake on the command line gets exit code 2 and a sentence that
// names it; a missing binary gets 1 and says how to build it.
func TestCommandLineMistakes(t *testing.T) {
	good := []string{"image", "--binaries", t.TempDir(), "--out", t.TempDir(), "--registry", "ghcr.io/quantumnode",
		"--version", "0.1.0", "--commit", "abc", "--date", "2026-11-25T15:23:47Z", "--source", "https://example.com", "--licenses", "NOASSERTION"}
	with := func(flag, value string) []string {
		args := append([]string{}, good...)
		for i := range args {
			if args[i] == flag {
				args[i+1] = value
				return args
			}
		}
		return append(args, flag, value)
	}
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"no command":                  {nil, 2, "usage: release <command>"},
		"an unknown command":          {[]string{"build"}, 2, `unknown command "build"`},
		"a required flag missing":     {[]string{"image", "--out", "x"}, 2, "--binaries is required"},
		"a version no tag can hold":   {with("--version", "0.1.0+build"), 2, `--version "0.1.0+build" cannot be an image tag`},
		"a date that is not RFC3339":  {with("--date", "1764084227"), 2, `--date "1764084227" is not an RFC 3339 time`},
		"an image this tool lacks":    {with("--names", "qn-webhook redis"), 2, `--names: no image "redis"`},
		"a platform without arch":     {with("--platforms", "linux"), 2, `--platforms: "linux" is not os/arch`},
		"a platform not Linux":        {with("--platforms", "darwin/arm64"), 2, `"darwin/arm64" is not a Linux platform`},
		"a stray argument":            {append(with("--names", "qnctl"), "extra"), 2, `unexpected arguments ["extra"]`},
		"no binary built":             {with("--names", "qnctl"), 1, "read the qnctl binary for linux/amd64"},
		"pin-chart without its flags": {[]string{"pin-chart", "--chart", "x"}, 2, "--chart, --images and --out are required"},
		"pin-chart without images.json": {[]string{"pin-chart", "--chart", "x", "--images", "/nonexistent/images.json", "--out", t.TempDir()},
			1, "read /nonexistent/images.json (written by make image)"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}
