package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/quantumnode/qn-admission/policies"
)

// quantumNodes is the resource qnctl audit lists from a cluster.
var quantumNodes = schema.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"}

// auditOptions are the flags of qnctl audit.
type auditOptions struct {
	PolicyDir string
	clusterOptions
	Output        string
	SkipRegoTests bool
	AllowEmpty    bool
}

func newAuditCommand(opts *commonOptions, s Streams) *cobra.Command {
	o := &auditOptions{Output: outputText}
	cmd := &cobra.Command{
		Use:   "audit [FILE]",
		Short: "Judge stored QuantumNodes against today's policies, as qn-controller's background audit does",
		Long: `audit judges every QuantumNode of a snapshot (FILE: what
'kubectl get qn -A -o yaml' prints, a List or a YAML stream; - reads stdin)
or of a live cluster (no FILE: the kubeconfig's cluster, all namespaces or
--namespace), with the engine qn-webhook and qn-controller run: each node as
an UPDATE of itself with no requester, under the role its qn-role annotation
names. Rules that read the requester or the request (user, groups, dry run,
the rate window, the time) cannot be judged from a stored object: they are
reported as skipped, never as passed.

It prints one line per non-compliant node (text), or every node's rules
(json), and a summary on stderr.

Exit codes: 0 every node complies, 1 a node does not, 2 usage error, bad
input, an unreachable cluster, a policy directory that does not load, or no
QuantumNode to judge (unless --allow-empty: an audit of nothing proves
nothing).`,
		Example: `  # Which stored nodes break the policies I am about to roll out?
  kubectl get qn -A -o yaml > nodes.yaml
  qnctl audit nodes.yaml --policy-dir ./policies

  # The same against the cluster of the current kubeconfig
  qnctl audit --policy-dir ./policies`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := ""
			if len(args) == 1 {
				file = args[0]
			}
			return runAudit(cmd.Context(), opts, o, file, s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.PolicyDir, "policy-dir", o.PolicyDir, "Policy directory (roles.yaml, *.rego, data.json|yaml); default: the bundled policies.")
	f.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the cluster to read QuantumNodes from when no FILE is given; default $KUBECONFIG, ~/.kube/config.")
	f.StringVar(&o.Context, "context", o.Context, "Kubeconfig context to use.")
	f.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "Only this namespace (default: all).")
	f.StringVarP(&o.Output, "output", "o", o.Output, "Output: text (one line per non-compliant node) or json (every node's rules).")
	f.BoolVar(&o.SkipRegoTests, "skip-rego-tests", false, "Load the policies without running their Rego unit tests.")
	f.BoolVar(&o.AllowEmpty, "allow-empty", false, "Exit 0 when there is no QuantumNode to judge (an empty snapshot, namespace or cluster).")
	_ = cmd.MarkFlagDirname("policy-dir")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON))
	return cmd
}

// auditedNode is one node's audit, as json output shows it.
type auditedNode struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Source says where the node came from (file and item).
	Source    string                `json:"source"`
	Compliant bool                  `json:"compliant"`
	Role      string                `json:"role"`
	Revision  string                `json:"revision"`
	Exempt    string                `json:"exempt,omitempty"`
	Rules     []policies.RuleResult `json:"rules"`
}

func runAudit(ctx context.Context, opts *commonOptions, o *auditOptions, file string, s Streams) error {
	if o.Output != outputText && o.Output != outputJSON {
		return usagef("--output %q is not one of text, json", o.Output)
	}
	p, err := loadPolicies(ctx, o.PolicyDir, opts, o.SkipRegoTests)
	if err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	var objects []document
	if file != "" {
		objects, err = readSnapshot(file, s.In)
	} else {
		objects, err = listCluster(ctx, o.clusterOptions)
		if err == nil {
			err = p.inventoryFromCluster(ctx, o.clusterOptions)
		}
	}
	if err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	p.warnWithoutInventory(s.Err)
	stored, others, err := storedNodes(objects, o.Namespace)
	if err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	engine := policies.NewEngine(p.Set, policies.EngineOptions{Inventory: p.Inventory})
	var nodes []auditedNode
	for _, n := range stored {
		res := engine.Audit(ctx, n.Object)
		nodes = append(nodes, auditedNode{Namespace: n.Namespace, Name: n.Name, Source: n.Source, Compliant: res.Compliant(), Role: res.Role, Revision: res.Revision, Exempt: res.Exempt, Rules: res.Rules})
	}
	slices.SortFunc(nodes, func(a, b auditedNode) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	if o.Output == outputJSON {
		if err := writeAuditJSON(s.Out, nodes); err != nil {
			return err
		}
	} else {
		writeAuditText(s.Out, nodes)
	}
	bad := writeAuditSummary(s.Err, p, nodes, others)
	if bad > 0 {
		return failed()
	}
	if len(nodes) == 0 && !o.AllowEmpty {
		where := "the cluster"
		if file != "" {
			where = file
		}
		if o.Namespace != "" {
			where += " in namespace " + o.Namespace
		}
		return &exitError{code: exitBadInput, err: fmt.Errorf("nothing was audited: %s holds no QuantumNode (%d other objects); --allow-empty accepts that", where, others)}
	}
	return nil
}

func writeAuditText(w io.Writer, nodes []auditedNode) {
	for _, n := range nodes {
		if n.Compliant {
			continue
		}
		var msgs []string
		for _, rr := range n.Rules {
			if rr.Verdict != policies.VerdictFail && rr.Verdict != policies.VerdictError {
				continue
			}
			for _, m := range rr.Messages {
				msgs = append(msgs, fmt.Sprintf("[%s.%s %s] %s", rr.Package, rr.Rule, rr.Verdict, m))
			}
		}
		fmt.Fprintf(w, "%s/%s (role %s): %s\n", n.Namespace, n.Name, n.Role, strings.Join(msgs, "; "))
	}
}

func writeAuditJSON(w io.Writer, nodes []auditedNode) error {
	if nodes == nil {
		nodes = []auditedNode{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(nodes); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// writeAuditSummary says how many nodes were judged, with which revision,
// and which rules were skipped; it returns how many do not comply.
func writeAuditSummary(w io.Writer, p *policySet, nodes []auditedNode, others int) int {
	compliant, bad, exempt := 0, 0, 0
	for _, n := range nodes {
		switch {
		case n.Exempt != "":
			exempt++
		case n.Compliant:
			compliant++
		default:
			bad++
		}
	}
	fmt.Fprintf(w, "%d QuantumNodes judged with policies %s (revision %s): %d compliant, %d non-compliant, %d exempt\n",
		len(nodes), p.Source, p.Set.Revision, compliant, bad, exempt)
	if others > 0 {
		if others == 1 {
			fmt.Fprintln(w, "1 object that is not a QuantumNode was left out")
		} else {
			fmt.Fprintf(w, "%d objects that are not QuantumNodes were left out\n", others)
		}
	}
	skips := policies.AuditSkips(context.Background(), p.Set)
	for _, rule := range slices.Sorted(func(yield func(string) bool) {
		for k := range skips {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, s := range skips[rule] {
			fmt.Fprintf(w, "skipped %s at %s: reads %s, which only an admission request has\n", rule, s.Location, strings.Join(s.Reads, ", "))
		}
	}
	return bad
}

// readSnapshot reads a List or a YAML stream of objects; an empty List is
// an empty cluster, not an error.
func readSnapshot(file string, stdin io.Reader) ([]document, error) {
	name, src, err := readSource(file, stdin)
	if err != nil {
		return nil, err
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []any  `json:"items"`
	}
	if doc, err := parseDocument(name, src); err == nil {
		if json.Unmarshal(doc.JSON, &list) == nil && strings.HasSuffix(list.Kind, "List") && len(list.Items) == 0 {
			return nil, nil
		}
	}
	// readDocuments reads stdin only through the source it is given.
	return readDocuments(file, bytes.NewReader(src))
}

// storedNode is one QuantumNode of a snapshot or a cluster.
type storedNode struct {
	Namespace, Name string
	// Source says where it came from (file and item, or the cluster).
	Source string
	Object map[string]any
}

// storedNodes picks the QuantumNodes (of namespace, when set) out of a
// snapshot's or a cluster's objects; others counts what is left out for
// being another kind.
func storedNodes(objects []document, namespace string) (nodes []storedNode, others int, err error) {
	for _, doc := range objects {
		var obj map[string]any
		if err := json.Unmarshal(doc.JSON, &obj); err != nil {
			return nil, 0, fmt.Errorf("%s: %v", doc.Name, err)
		}
		if obj["kind"] != "QuantumNode" || !strings.HasPrefix(fmt.Sprint(obj["apiVersion"]), quantumNodes.Group+"/") {
			others++
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		if namespace != "" && ns != namespace {
			continue
		}
		name, _ := meta["name"].(string)
		nodes = append(nodes, storedNode{Namespace: ns, Name: name, Source: doc.Name, Object: obj})
	}
	return nodes, others, nil
}

// listCluster lists QuantumNodes from the kubeconfig's cluster.
func listCluster(ctx context.Context, o clusterOptions) ([]document, error) {
	cfg, err := o.restConfig("qnctl-audit")
	if err != nil {
		return nil, fmt.Errorf("no FILE given and no cluster to read QuantumNodes from: %w", err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	var docs []document
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := client.Resource(quantumNodes).Namespace(o.Namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list %s on %s: %w", quantumNodes.GroupResource(), cfg.Host, err)
		}
		for i := range list.Items {
			item := &list.Items[i]
			js, err := item.MarshalJSON()
			if err != nil {
				return nil, err
			}
			docs = append(docs, document{Name: fmt.Sprintf("%s %s/%s", cfg.Host, item.GetNamespace(), item.GetName()), JSON: js})
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return docs, nil
		}
	}
}
