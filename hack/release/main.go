// Command release builds qn-admission's container images and pins the Helm
// chart to them, offline: no container registry, no Docker daemon.
//
//	release image      OCI images from the binaries `make build-platforms` made
//	release pin-chart  a copy of the chart whose values name the images by digest
//
// The Makefile runs it (`make image`, `make release-dry-run`); see
// docs/release.md. It is a module of its own so that the product's go.mod
// does not grow for a build tool, and so that the release tools it pins
// (helm, crane, syft: `go tool` in this directory) share one go.sum.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage: release <command> [flags]

commands:
  image      build OCI images from static binaries into OCI layouts, print their digests
  pin-chart  copy the chart with values that name the built images by digest

Run "release <command> -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the process's exit code: 0 done,
// 1 failed, 2 usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "image":
		err = imageCommand(args[1:], stdout, stderr)
	case "pin-chart":
		err = pinChartCommand(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "release: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "release %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "release %s: %v\n", args[0], err)
		return 1
	}
}

// usageError is a mistake in the command line, answered with exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }
