// Command qn-webhook serves the qn-admission validating and mutating
// admission webhooks. The wiring lives in cmd/qn-webhook/app.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/quantumnode/qn-admission/cmd/qn-webhook/app"
	"github.com/quantumnode/qn-admission/internal/version"
)

func main() {
	opts := app.NewOptions()
	// ExitOnError names a mistyped flag on stderr, with the usage, and
	// exits 2.
	fs := pflag.NewFlagSet("qn-webhook", pflag.ExitOnError)
	opts.AddFlags(fs)
	showVersion := fs.Bool("version", false, "Print the version, commit and commit date, then exit.")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "qn-webhook: unexpected argument %q: every setting is a --flag\n", fs.Arg(0))
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println(version.Get().String("qn-webhook"))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := app.Run(ctx, opts, opts.Logger(os.Stdout)); err != nil {
		fmt.Fprintf(os.Stderr, "qn-webhook: %v\n", err)
		os.Exit(1)
	}
}
