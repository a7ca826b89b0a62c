package app

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/quantumnode/qn-admission/policies/vap"
)

// Modes of the compiled policy's binding.
const (
	vapEnforce = "enforce"
	vapAudit   = "audit"
)

type vapOptions struct {
	PolicyDir         string
	Name              string
	Mode              string
	ExcludeNamespaces []string
	FailurePolicy     string
	Output            string
}

func newVAPCommand(opts *commonOptions, s Streams) *cobra.Command {
	o := &vapOptions{Name: vap.DefaultName, Mode: vapEnforce, ExcludeNamespaces: []string{"kube-system"}, FailurePolicy: string(admissionregistrationv1.Ignore), Output: outputYAML}
	cmd := &cobra.Command{
		Use:   "vap",
		Short: "Compile the role table into a ValidatingAdmissionPolicy the API server enforces itself",
		Long: `vap compiles the static part of a policy directory's role table (the bundled
policies without --policy-dir) into a ValidatingAdmissionPolicy, its binding
and its parameters (a QuantumNodeRoleTable), and writes them to stdout as one
YAML stream for kubectl apply -f -. The API server then enforces, beside the
webhook and while it is down: the operations each role allows, the stored
role judging UPDATE and DELETE (no escape by dropping or changing qn-role),
moveTo, requesters and delete lists, the exemptions, the control plane's
deletions, and the bundled role conditions that are plain comparisons
(zone in a list, latency budget below a number, priority equal to a value).

Rate windows, Rego and mutations stay with the webhook. The stream opens
with a report, as comments, of where every rule of every role is enforced
and why a rule was left out; -o text prints only the report.

The QuantumNodeRoleTable CRD (config/crd) must be installed first. The
policy's CEL is the same for every role table: a change of roles.yaml
changes only the QuantumNodeRoleTable.

Exit codes: 0 written, 2 the directory does not load or does not compile.`,
		Example: `  # Enforce the bundled role table inside the API server
  qnctl vap | kubectl apply -f -

  # See first what it would refuse: warnings and audit annotations only
  qnctl vap --policy-dir ./policies --mode audit | kubectl apply -f -

  # Where is each rule of my role table enforced?
  qnctl vap --policy-dir ./policies -o text`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVAP(cmd.Context(), opts, o, s.Out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.PolicyDir, "policy-dir", o.PolicyDir, "Policy directory (roles.yaml, *.rego, data.json|yaml); default: the bundled policies.")
	f.StringVar(&o.Name, "name", o.Name, "Name of the policy, its binding and its parameters.")
	f.StringVar(&o.Mode, "mode", o.Mode, "enforce (the binding denies) or audit (warnings and audit annotations only).")
	f.StringSliceVar(&o.ExcludeNamespaces, "exclude-namespace", o.ExcludeNamespaces, "Namespaces the binding never judges, as the webhook configurations' namespaceSelector excludes them (repeat or comma-separate).")
	f.StringVar(&o.FailurePolicy, "failure-policy", o.FailurePolicy, "What the API server does when it cannot evaluate the policy (its parameters' kind not served): Ignore admits, the webhook still judges; Fail refuses every QuantumNode write.")
	f.StringVarP(&o.Output, "output", "o", o.Output, "Output: yaml (the objects, the report as comments) or text (the report only).")
	_ = cmd.MarkFlagDirname("policy-dir")
	_ = cmd.RegisterFlagCompletionFunc("mode", fixedCompletion(vapEnforce, vapAudit))
	_ = cmd.RegisterFlagCompletionFunc("failure-policy", fixedCompletion(string(admissionregistrationv1.Fail), string(admissionregistrationv1.Ignore)))
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputYAML, outputText))
	return cmd
}

func runVAP(ctx context.Context, opts *commonOptions, o *vapOptions, w io.Writer) error {
	compileOpts := vap.Options{Name: o.Name, ExcludeNamespaces: o.ExcludeNamespaces}
	switch o.Mode {
	case vapEnforce:
		compileOpts.Actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	case vapAudit:
		compileOpts.Actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit, admissionregistrationv1.Warn}
	case "off":
		// The chart's admissionPolicy.mode: off installs nothing; there is
		// nothing for qnctl to write.
		return usagef("--mode off writes nothing: to run without the API server's copy, apply nothing (the chart's admissionPolicy.mode: off installs none); modes are %s, %s", vapEnforce, vapAudit)
	default:
		return usagef("--mode %q is not one of %s, %s", o.Mode, vapEnforce, vapAudit)
	}
	switch fp := admissionregistrationv1.FailurePolicyType(o.FailurePolicy); fp {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
		compileOpts.FailurePolicy = fp
	default:
		return usagef("--failure-policy %q is not one of Fail, Ignore", o.FailurePolicy)
	}
	if o.Output != outputYAML && o.Output != outputText {
		return usagef("--output %q is not one of %s, %s", o.Output, outputYAML, outputText)
	}
	if o.Name == "" || strings.ContainsAny(o.Name, " /") {
		return usagef("--name %q is not an object name", o.Name)
	}
	p, err := loadPolicies(ctx, o.PolicyDir, opts, false)
	if err != nil {
		return err
	}
	compileOpts.Source = p.Source
	compiled, err := vap.Compile(p.Set, compileOpts)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Source, err)
	}
	if o.Output == outputText {
		_, err := fmt.Fprintln(w, strings.Join(compiled.Report.Text(), "\n"))
		return err
	}
	out, err := compiled.YAML()
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}
