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
	"github.com/quantumnode/qn-admission/policies/pattern"
)

func main() {
	pattern.DiscardMatcherLogs()
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("qn-webhook", pflag.ExitOnError)
	opts.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])

	logger := opts.Logger(os.Stdout)
	app.TuneGC(logger)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := app.Run(ctx, opts, logger); err != nil {
		fmt.Fprintf(os.Stderr, "qn-webhook: %v\n", err)
		os.Exit(1)
	}
}
