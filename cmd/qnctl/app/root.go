// Package app is the qnctl command line: it evaluates, explains, tests and
// lints qn-admission policies offline with the engine the server runs. Every
// decision goes through webhook.DecodeReview and webhook.Answer with a
// policies.Engine, exactly as qn-webhook answers a request; qnctl adds only
// input handling, fixtures and reports.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quantumnode/qn-admission/policies/pattern"
)

// Exit codes shared by every command.
const (
	// exitOK: allowed, every test passed, no lint problem.
	exitOK = 0
	// exitFailed: denied, a test failed, or lint found problems.
	exitFailed = 1
	// exitBadInput: bad usage, unreadable or invalid input, or a policy
	// directory that does not load.
	exitBadInput = 2
)

// Streams are the standard streams a command reads and writes.
type Streams struct {
	// In is read by "-" (eval's input from stdin).
	In io.Reader
	// Out receives reports and answers.
	Out io.Writer
	// Err receives errors and usage hints.
	Err io.Writer
}

// commonOptions apply to every command that loads policies; they mirror the
// qn-webhook flags of the same name so a set loads the same way.
type commonOptions struct {
	// AllowNetworkBuiltins keeps http.send and friends available to Rego.
	AllowNetworkBuiltins bool
	// PolicyEvalTimeout bounds one policy evaluation.
	PolicyEvalTimeout time.Duration
	// Inventory is a snapshot file of stored objects (a List) that
	// policies read as data.inventory; empty: none.
	Inventory string
}

// exitError carries an exit code out of a command whose report is already
// written; a nil err means nothing more is printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// failed ends a command with exitFailed after its report was printed.
func failed() error { return &exitError{code: exitFailed} }

// usageError is a mistake in the command line itself.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// Main runs qnctl with args (without the program name) and returns the
// process exit code.
func Main(ctx context.Context, args []string, s Streams) int {
	// What the pattern matcher would log, a Verdict already says.
	pattern.DiscardMatcherLogs()
	cmd := newCommand(s)
	cmd.SetArgs(args)
	ran, err := cmd.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(s.Err, "qnctl: %s\n", printableLines(ee.err.Error()))
		}
		return ee.code
	}
	fmt.Fprintf(s.Err, "qnctl: %s\n", printableLines(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		if ran == nil {
			ran = cmd
		}
		fmt.Fprintf(s.Err, "Run '%s --help' for usage.\n", ran.CommandPath())
	}
	return exitBadInput
}

// isCobraUsageError recognises the argument and flag errors cobra returns
// before a command runs.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "flag needs an argument", "invalid argument", "accepts ", "requires "} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// newCommand builds the qnctl command tree.
func newCommand(s Streams) *cobra.Command {
	opts := &commonOptions{PolicyEvalTimeout: time.Second}
	root := &cobra.Command{
		Use:   "qnctl",
		Short: "Evaluate, explain, test and lint qn-admission policies offline",
		Long: `qnctl does offline what qn-webhook does online, with the same engine code:
it loads a policy directory (roles.yaml, *.rego, data.json|yaml) the way the
server does, and answers AdmissionReviews exactly as the server would.

Exit codes: 0 allowed / passed / clean, 1 denied / a test failed / lint
problems, 2 usage error, unreadable or invalid input, or a policy directory
that does not load.`,
		Example: `  # Why would the webhook deny this QuantumNode?
  qnctl eval node.yaml --user alice --explain

  # Run the Rego unit tests and the fixture cases of a policy directory
  qnctl test ./policies

  # Check a policy directory before it reaches a cluster
  qnctl lint ./policies

  # What would this HorizontalQNScaler do at 12.5, now?
  kubectl get hqs orders -o yaml | qnctl scaler explain - --value 12.5`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion().text(),
	}
	root.SetVersionTemplate("{{.Version}}")
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{msg: err.Error()}
	})
	root.PersistentFlags().BoolVar(&opts.AllowNetworkBuiltins, "allow-network-builtins", opts.AllowNetworkBuiltins,
		"Keep http.send, net.lookup_ip_addr and opa.runtime available to Rego (as qn-webhook --allow-network-builtins).")
	root.PersistentFlags().DurationVar(&opts.PolicyEvalTimeout, "policy-eval-timeout", opts.PolicyEvalTimeout,
		"Deadline of one policy evaluation (as qn-webhook --policy-eval-timeout).")
	root.PersistentFlags().StringVar(&opts.Inventory, "inventory", opts.Inventory,
		"A List of stored objects (kubectl get nodes,quantumnodes -A -o yaml) that policies read as data.inventory, as qn-webhook --inventory keeps them (eval, test, audit).")
	root.AddCommand(
		newEvalCommand(opts, s),
		newTestCommand(opts, s),
		newLintCommand(opts, s),
		newAuditCommand(opts, s),
		newVAPCommand(opts, s),
		newImpactCommand(opts, s),
		newScalerCommand(s),
		newRolloutCommand(s),
		newVersionCommand(s),
	)
	return root
}
