// Command qn-webhook serves the qn-admission validating and mutating
// admission webhooks.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/quantumnode/qn-admission/webhook"
)

func main() {
	opts := webhook.NewOptions()
	fs := pflag.NewFlagSet("qn-webhook", pflag.ExitOnError)
	opts.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])

	var handler slog.Handler = slog.NewJSONHandler(os.Stdout, nil)
	if opts.LogFormat == "text" {
		handler = slog.NewTextHandler(os.Stdout, nil)
	}
	logger := slog.New(handler)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := webhook.Run(ctx, opts, logger); err != nil {
		fmt.Fprintf(os.Stderr, "qn-webhook: %v\n", err)
		os.Exit(1)
	}
}
