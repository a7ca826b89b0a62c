// Command qnprof is qn-webhook with a pprof listener, for CPU and heap
// profiles under load (qnload --cpuprofile). It runs the same app.Run
// with the same flags as cmd/qn-webhook, plus --pprof-address. It is not a
// product binary: measurements use cmd/qn-webhook itself.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/quantumnode/qn-admission/cmd/qn-webhook/app"
)

func main() {
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("qnprof", pflag.ExitOnError)
	opts.AddFlags(fs)
	pprofAddr := fs.String("pprof-address", "127.0.0.1:0", "Plain-HTTP address of /debug/pprof.")
	_ = fs.Parse(os.Args[1:])

	logger := opts.Logger(os.Stdout)
	ln, err := net.Listen("tcp", *pprofAddr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "qnprof: %v\n", err)
		os.Exit(1)
	}
	logger.Info("serving pprof", "pprofAddress", ln.Addr().String())
	go func() {
		srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 5 * time.Second}
		_ = srv.Serve(ln)
	}()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := app.Run(ctx, opts, logger); err != nil {
		fmt.Fprintf(os.Stderr, "qnprof: %v\n", err)
		os.Exit(1)
	}
}
