// Command qnctl evaluates, explains, tests and lints qn-admission policies
// offline, with the engine qn-webhook runs.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/quantumnode/qn-admission/cmd/qnctl/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := app.Main(ctx, os.Args[1:], app.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
