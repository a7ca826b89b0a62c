// Command qn-controller reconciles QuantumNodes: it keeps the Service of
// each one in its declared shape and its status true to the cluster's
// Nodes. See docs/controller.md. The wiring lives in cmd/qn-controller/app.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/quantumnode/qn-admission/cmd/qn-controller/app"
	"github.com/quantumnode/qn-admission/internal/version"
)

func main() {
	opts := app.NewOptions(os.Getenv)
	// ExitOnError names a mistyped flag on stderr, with the usage, and
	// exits 2, as qn-webhook does: a typo in a Deployment's args must not
	// become a crash loop with empty logs.
	fs := pflag.NewFlagSet("qn-controller", pflag.ExitOnError)
	opts.AddFlags(fs)
	showVersion := fs.Bool("version", false, "Print the version, commit and commit date, then exit.")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "qn-controller: unexpected argument %q: every setting is a --flag\n", fs.Arg(0))
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println(version.Get().String("qn-controller"))
		return
	}
	if err := opts.Validate(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "qn-controller:", err)
		os.Exit(2)
	}
	// SIGTERM or SIGINT cancels the context; a second one exits at once.
	if err := app.Run(ctrl.SetupSignalHandler(), opts, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "qn-controller:", err)
		os.Exit(1)
	}
}
