package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller/rollout"
)

// rolloutFieldManager names qnctl's rollbacks in managedFields, and its
// requests in the API server's logs (user agent).
const rolloutFieldManager = "qnctl-rollout"

// clusterOptions reach a cluster through a kubeconfig, as kubectl does.
type clusterOptions struct {
	Kubeconfig string
	Context    string
	Namespace  string
}

func (o *clusterOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig file; default $KUBECONFIG, ~/.kube/config.")
	f.StringVar(&o.Context, "context", o.Context, "Kubeconfig context to use.")
	f.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "Namespace of the QuantumNode; default the context's.")
}

// loader reads the kubeconfig as kubectl does.
func (o *clusterOptions) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
}

// restConfig is how to reach the kubeconfig's cluster, as userAgent.
func (o *clusterOptions) restConfig(userAgent string) (*rest.Config, error) {
	cfg, err := o.loader().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to talk to (--kubeconfig, $KUBECONFIG, ~/.kube/config): %w", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// client connects to the cluster and returns the namespace to use.
func (o *clusterOptions) client(userAgent string) (client.Client, string, error) {
	cfg, err := o.restConfig(userAgent)
	if err != nil {
		return nil, "", err
	}
	ns := o.Namespace
	if ns == "" {
		if ns, _, err = o.loader().Namespace(); err != nil {
			return nil, "", fmt.Errorf("the kubeconfig's namespace: %w", err)
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	if err := qnv1alpha1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return c, ns, nil
}

func newRolloutCommand(s Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show a QuantumNode's spec revisions and roll it back, as kubectl rollout does for Deployments",
		Long: `qn-controller keeps each QuantumNode's spec history as ControllerRevisions
(spec.revisionHistoryLimit, default 10): hardware, services and nodeName.
'rollout history' lists them; 'rollout undo' patches the spec back to one,
through the API server and so through admission, as you.

With Argo CD or Flux, Git holds the spec: they will apply it again over a
rollback. Roll back in Git instead, or pause their sync first.`,
	}
	cmd.AddCommand(newRolloutHistoryCommand(s), newRolloutUndoCommand(s))
	return cmd
}

type historyOptions struct {
	clusterOptions
	Revision int64
	Output   string
}

func newRolloutHistoryCommand(s Streams) *cobra.Command {
	o := &historyOptions{Output: outputText}
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "List a QuantumNode's spec revisions",
		Long: `history lists the revisions of a QuantumNode, oldest first: number, the
declared services, whether it is the current spec and whether it is the
last one that was Ready, and the kubernetes.io/change-cause annotation the
node carried when the revision was recorded. --revision N prints that
revision's spec.

Exit codes: 0 listed, 2 usage error, no such node or revision, or an
unreachable cluster.`,
		Example: `  qnctl rollout history edge-1 -n lab
  qnctl rollout history edge-1 -n lab --revision 3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHistory(cmd.Context(), o, args[0], s)
		},
	}
	o.addFlags(cmd)
	cmd.Flags().Int64Var(&o.Revision, "revision", 0, "Print this revision's spec.")
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output: text or json.")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON))
	return cmd
}

// historyEntry is one revision as json output shows it.
type historyEntry struct {
	Revision    int64                `json:"revision"`
	Name        string               `json:"name"`
	Current     bool                 `json:"current"`
	Ready       bool                 `json:"ready"`
	ChangeCause string               `json:"changeCause,omitempty"`
	Created     time.Time            `json:"created"`
	Spec        rollout.SnapshotSpec `json:"spec"`
	Problem     string               `json:"problem,omitempty"`
}

func runHistory(ctx context.Context, o *historyOptions, name string, s Streams) error {
	if o.Output != outputText && o.Output != outputJSON {
		return usagef("--output %q is not one of text, json", o.Output)
	}
	c, qn, err := o.quantumNode(ctx, name)
	if err != nil {
		return err
	}
	ns := qn.Namespace
	history, err := rollout.History(ctx, c, qn)
	if err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	if o.Revision != 0 {
		for _, e := range history {
			if e.Number == o.Revision {
				return printRevision(e, o.Output, s)
			}
		}
		return &exitError{code: exitBadInput, err: fmt.Errorf("QuantumNode %s/%s has no revision %d", ns, name, o.Revision)}
	}
	if o.Output == outputJSON {
		out := make([]historyEntry, 0, len(history))
		for _, e := range history {
			out = append(out, entryOf(e))
		}
		return writeJSON(s, out)
	}
	fmt.Fprintf(s.Out, "QuantumNode %s/%s\n", ns, name)
	if len(history) == 0 {
		fmt.Fprintln(s.Out, "no revisions recorded yet (qn-controller records them)")
		return nil
	}
	w := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REVISION\tSERVICES\tSTATUS\tCHANGE-CAUSE")
	for _, e := range history {
		var status []string
		if e.Current {
			status = append(status, "current")
		}
		if e.Ready {
			status = append(status, "last Ready")
		}
		cause := e.ChangeCause
		if cause == "" {
			cause = "<none>"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", e.Number, services(e), strings.Join(status, ", "), printable(cause))
	}
	return w.Flush()
}

func entryOf(e rollout.Entry) historyEntry {
	return historyEntry{Revision: e.Number, Name: e.Name, Current: e.Current, Ready: e.Ready, ChangeCause: e.ChangeCause, Created: e.Created, Spec: e.Snapshot.Spec, Problem: e.Problem}
}

func services(e rollout.Entry) string {
	if e.Problem != "" {
		return "(unreadable)"
	}
	parts := make([]string, 0, len(e.Snapshot.Spec.Services))
	for _, svc := range e.Snapshot.Spec.Services {
		parts = append(parts, fmt.Sprintf("%s:%d", svc.Name, svc.Port))
	}
	return strings.Join(parts, ",")
}

func printRevision(e rollout.Entry, output string, s Streams) error {
	if e.Problem != "" {
		return &exitError{code: exitBadInput, err: fmt.Errorf("revision %d: %s", e.Number, e.Problem)}
	}
	if output == outputJSON {
		return writeJSON(s, entryOf(e))
	}
	data, err := yaml.Marshal(e.Snapshot)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "# revision %d (%s)\n%s", e.Number, e.Name, data)
	return nil
}

func writeJSON(s Streams, v any) error {
	enc := json.NewEncoder(s.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type undoOptions struct {
	clusterOptions
	ToRevision int64
}

func newRolloutUndoCommand(s Streams) *cobra.Command {
	o := &undoOptions{}
	cmd := &cobra.Command{
		Use:   "undo NAME",
		Short: "Roll a QuantumNode's spec back to an earlier revision",
		Long: `undo patches the QuantumNode's spec (hardware, services, nodeName) back to
the previous revision, or to --to-revision N, and records the rollback in
the qn.dev/rollback annotation. The write goes through the API server as
you: admission judges it like any update (a role that may not update, such
as the bundled batch role, refuses it). qn-controller then records the
restored spec as the newest revision, as Deployments do.

Exit codes: 0 rolled back, 1 refused by the API server or admission, 2
usage error, no such node or revision, or an unreachable cluster.`,
		Example: `  qnctl rollout undo edge-1 -n lab
  qnctl rollout undo edge-1 -n lab --to-revision 3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUndo(cmd.Context(), o, args[0], s)
		},
	}
	o.addFlags(cmd)
	cmd.Flags().Int64Var(&o.ToRevision, "to-revision", 0, "The revision to roll back to; default the one before the current.")
	return cmd
}

func runUndo(ctx context.Context, o *undoOptions, name string, s Streams) error {
	if o.ToRevision < 0 {
		return usagef("--to-revision must be a revision number, got %d", o.ToRevision)
	}
	c, qn, err := o.quantumNode(ctx, name)
	if err != nil {
		return err
	}
	ns := qn.Namespace
	rec, err := rollout.Undo(ctx, c, qn, o.ToRevision, rolloutFieldManager, time.Now())
	if err != nil {
		// The API server answered (admission, RBAC, a conflict): refused.
		var status apierrors.APIStatus
		if rec.ToRevision != 0 && errors.As(err, &status) {
			return &exitError{code: exitFailed, err: err}
		}
		return &exitError{code: exitBadInput, err: err}
	}
	fmt.Fprintf(s.Out, "QuantumNode %s/%s rolled back: revision %d → %d (%s)\n", ns, name, rec.FromRevision, rec.ToRevision, rec.ID)
	return nil
}

// quantumNode connects to the cluster and reads the QuantumNode name in
// the namespace to use: what every rollout command starts with. Its
// errors are usage errors (exit 2).
func (o *clusterOptions) quantumNode(ctx context.Context, name string) (client.Client, *qnv1alpha1.QuantumNode, error) {
	c, ns, err := o.client(rolloutFieldManager)
	if err != nil {
		return nil, nil, &exitError{code: exitBadInput, err: err}
	}
	qn := &qnv1alpha1.QuantumNode{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, qn); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &exitError{code: exitBadInput, err: fmt.Errorf("QuantumNode %s/%s not found", ns, name)}
		}
		return nil, nil, &exitError{code: exitBadInput, err: fmt.Errorf("read QuantumNode %s/%s: %w", ns, name, err)}
	}
	return c, qn, nil
}
