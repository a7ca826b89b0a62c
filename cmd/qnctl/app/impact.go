package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/webhook"
)

// impactOptions are the flags of qnctl impact.
type impactOptions struct {
	Base     string
	Proposed string
	// AuditLogs are kube-apiserver audit logs, replayed in order.
	AuditLogs []string
	// Reviews are directories of recorded AdmissionReviews.
	Reviews []string
	// DecisionLogs are qn-webhook decision logs whose shadow
	// disagreements are reported (instead of judging with two sets).
	DecisionLogs []string
	// Cluster reads the stored QuantumNodes of the kubeconfig's cluster.
	Cluster bool
	clusterOptions
	Time            string
	Output          string
	AllowNewDenials bool
	AllowEmpty      bool
	SkipRegoTests   bool
}

// Input kinds, as reports name them.
const (
	inputAuditLog = "audit log"
	inputSnapshot = "snapshot"
	inputCluster  = "cluster"
	inputReviews  = "reviews"
)

const outputMarkdown = "markdown"

func newImpactCommand(opts *commonOptions, s Streams) *cobra.Command {
	o := &impactOptions{Output: outputText}
	cmd := &cobra.Command{
		Use:   "impact --base OLD --proposed NEW [SNAPSHOT...]",
		Short: "Compare two policy sets on real requests and stored QuantumNodes: every answer the change flips",
		Long: `impact judges real inputs under two policy sets, the one in force (--base:
a policy directory, or a Git ref of the repository --proposed lives in) and
the proposed one (--proposed, a directory), with the engine qn-webhook runs,
and lists every answer that differs: requests newly denied or newly allowed,
denials whose reasons changed, warnings and patches that changed, each with
the requester, the object and both answers, grouped by role and by the
policy packages whose answers changed.

Inputs, any mix:
  SNAPSHOT...        what 'kubectl get qn -A -o yaml' prints: each stored
                     QuantumNode judged as an UPDATE of itself with no
                     requester, as qnctl audit and qn-controller do
  --cluster          the same, read from the kubeconfig's cluster
                     (implied by --kubeconfig or --context)
  --audit-log FILE   a kube-apiserver audit log (audit.k8s.io/v1 Event
                     lines, QuantumNodes at Request or RequestResponse
                     level): every QuantumNode write replayed in order, at
                     the time it was received, with its requester, its
                     object and the object as the log last recorded it;
                     each set counts its own rate windows as the server
                     would have
  --reviews DIR      recorded AdmissionReviews (*.json, *.yaml), judged in
                     file name order at --time

Exit codes: 0 nothing would newly be denied (or --allow-new-denials), 1 a
request or stored object would newly be denied, 2 usage error, bad input,
nothing to judge (unless --allow-empty), or a policy set that does not load.`,
		Example: `  # What does my branch change for last week's writes and today's nodes?
  qnctl impact --base main --proposed ./policies --audit-log /var/log/kube/audit.log nodes.yaml

  # A comment for the pull request
  qnctl impact --base origin/main --proposed ./policies --audit-log audit.log -o markdown > impact.md

  # Two directories, against the live cluster's QuantumNodes
  qnctl impact --base ./policies-v1 --proposed ./policies-v2 --cluster`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("kubeconfig") || cmd.Flags().Changed("context") {
				o.Cluster = true
			}
			return runImpact(cmd.Context(), opts, o, args, s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Base, "base", "", "The policies in force: a policy directory, or a Git ref (branch, tag, commit) of the repository --proposed is in.")
	f.StringVar(&o.Proposed, "proposed", "", "The proposed policy directory.")
	f.StringArrayVar(&o.AuditLogs, "audit-log", nil, "kube-apiserver audit log to replay (repeat for rotated files, oldest first; - is stdin).")
	f.StringArrayVar(&o.Reviews, "reviews", nil, "Directory of recorded AdmissionReviews to judge (repeatable).")
	f.BoolVar(&o.Cluster, "cluster", false, "Judge the stored QuantumNodes of the kubeconfig's cluster.")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "Kubeconfig of the cluster (implies --cluster); default $KUBECONFIG, ~/.kube/config.")
	f.StringVar(&o.Context, "context", "", "Kubeconfig context (implies --cluster).")
	f.StringVarP(&o.Namespace, "namespace", "n", "", "Only QuantumNodes of this namespace, stored and in audit logs (default: all).")
	f.StringArrayVar(&o.DecisionLogs, "decision-log", nil, "qn-webhook decision log(s) (- for stdin): report the disagreements its shadow set (--shadow-policy-dir) found on live traffic, served set as base, shadow as proposal; no --base or --proposed then.")
	f.StringVar(&o.Time, "time", "", "Time of the requests in --reviews, RFC 3339 (default now).")
	f.StringVarP(&o.Output, "output", "o", o.Output, "Output: text, json, or markdown (for a pull-request comment).")
	f.BoolVar(&o.AllowNewDenials, "allow-new-denials", false, "Exit 0 even when the proposed set would deny what the base set admits.")
	f.BoolVar(&o.AllowEmpty, "allow-empty", false, "Exit 0 when the inputs hold nothing to judge (no QuantumNode write, no stored QuantumNode).")
	f.BoolVar(&o.SkipRegoTests, "skip-rego-tests", false, "Load both sets without running their Rego unit tests.")
	_ = cmd.MarkFlagDirname("proposed")
	_ = cmd.MarkFlagDirname("reviews")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON, outputMarkdown))
	return cmd
}

// impactReport is the outcome of qnctl impact.
type impactReport struct {
	Base     policiesJSON   `json:"base"`
	Proposed policiesJSON   `json:"proposed"`
	Inputs   []*inputReport `json:"inputs"`
	// Totals count flips by change (a flip may count under two).
	Totals map[string]int `json:"totals"`
	Groups []*impactGroup `json:"groups"`
}

// impactGroup is the flips of one role whose answers changed because of
// the same packages.
type impactGroup struct {
	Role     string         `json:"role"`
	Packages []string       `json:"packages"`
	Totals   map[string]int `json:"totals"`
	Flips    []flip         `json:"flips"`
}

func runImpact(ctx context.Context, opts *commonOptions, o *impactOptions, snapshots []string, s Streams) error {
	switch o.Output {
	case outputText, outputJSON, outputMarkdown:
	default:
		return usagef("--output %q is not one of text, json, markdown", o.Output)
	}
	if len(o.DecisionLogs) > 0 {
		return runImpactOfShadow(ctx, o, snapshots, s)
	}
	if o.Base == "" || o.Proposed == "" {
		return usagef("give both --base (the policies in force) and --proposed (the change)")
	}
	if len(snapshots)+len(o.AuditLogs)+len(o.Reviews) == 0 && !o.Cluster {
		return usagef("nothing to judge the change on: give snapshots, --audit-log, --reviews or --cluster")
	}
	reviewTime := time.Now().UTC()
	if o.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, o.Time)
		if err != nil {
			return usagef("--time %q is not an RFC 3339 time (e.g. 2026-03-01T10:00:00Z)", o.Time)
		}
		reviewTime = t
	}
	if st, err := os.Stat(o.Proposed); err != nil || !st.IsDir() {
		return usagef("--proposed %s is not a policy directory", o.Proposed)
	}
	baseRef, cleanup, err := resolveBase(ctx, o.Base, o.Proposed)
	defer cleanup()
	if err != nil {
		return err
	}
	base, err := loadPolicies(ctx, baseRef.Dir, opts, o.SkipRegoTests)
	if err != nil {
		return fmt.Errorf("--base %s: %w", baseRef.Name, err)
	}
	base.Source = baseRef.Name
	proposed, err := loadPolicies(ctx, o.Proposed, opts, o.SkipRegoTests)
	if err != nil {
		return fmt.Errorf("--proposed %s: %w", o.Proposed, err)
	}
	if o.Cluster {
		// Judging the cluster, both sets read its inventory of now.
		for _, p := range []*policySet{base, proposed} {
			if err := p.inventoryFromCluster(ctx, o.clusterOptions); err != nil {
				return &exitError{code: exitBadInput, err: err}
			}
		}
	}
	base.warnWithoutInventory(s.Err)
	proposed.warnWithoutInventory(s.Err)
	// A replay allocates much per request and keeps little (the windows,
	// the flips): collecting less often is a third of its time.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	c := &comparison{base: base.Set, proposed: proposed.Set, baseInventory: base.Inventory, proposedInventory: proposed.Inventory}
	if err := c.judgeStored(ctx, o, snapshots, s); err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	if err := c.replayAuditLogs(ctx, o.AuditLogs, o.Namespace, s); err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	for _, dir := range o.Reviews {
		if err := c.judgeReviews(ctx, dir, reviewTime); err != nil {
			return &exitError{code: exitBadInput, err: err}
		}
	}
	return finishImpact(c.report(base, proposed), o, o.Proposed, s)
}

// runImpactOfShadow reports the disagreements qn-webhook's shadow set
// (--shadow-policy-dir) found on live traffic, from its decision logs:
// the served set is the base, the shadow set the proposal.
func runImpactOfShadow(ctx context.Context, o *impactOptions, snapshots []string, s Streams) error {
	if o.Base != "" || o.Proposed != "" || len(snapshots)+len(o.AuditLogs)+len(o.Reviews) > 0 || o.Cluster {
		return usagef("--decision-log reports what qn-webhook's shadow set found, with both answers from the log: give it without --base, --proposed or other inputs")
	}
	c := &comparison{}
	served, shadow, err := c.readDecisionLogs(ctx, o.DecisionLogs, o.Namespace, s)
	if err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	report := c.report(&policySet{Source: "served", Set: &policies.Set{Revision: revisionsOf(served)}},
		&policySet{Source: "shadow (--shadow-policy-dir)", Set: &policies.Set{Revision: revisionsOf(shadow)}})
	return finishImpact(report, o, "the shadow set", s)
}

// finishImpact writes the report and says how it ends: 2 when nothing was
// judged, 1 when something would newly be denied (each unless allowed).
func finishImpact(report *impactReport, o *impactOptions, proposed string, s Streams) error {
	if err := writeImpact(s.Out, report, o.Output); err != nil {
		return err
	}
	judged := 0
	for _, in := range report.Inputs {
		judged += in.Judged
	}
	if judged == 0 && !o.AllowEmpty {
		return &exitError{code: exitBadInput, err: fmt.Errorf("nothing was judged: the inputs hold no QuantumNode write and no stored QuantumNode (%s); --allow-empty accepts that", describeInputs(report.Inputs))}
	}
	if report.Totals[changeNewlyDenied] > 0 && !o.AllowNewDenials {
		return &exitError{code: exitFailed, err: fmt.Errorf("%d would newly be denied by %s; --allow-new-denials accepts that", report.Totals[changeNewlyDenied], proposed)}
	}
	return nil
}

// describeInputs says what each input held, for the empty case.
func describeInputs(inputs []*inputReport) string {
	var parts []string
	for _, in := range inputs {
		part := fmt.Sprintf("%s %s: %d judged", in.Kind, in.Source, in.Judged)
		for why, n := range in.Skipped {
			part += fmt.Sprintf(", %d %s", n, why)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// judgeStored judges the QuantumNodes of each snapshot and of the
// cluster, as qnctl audit reads them.
func (c *comparison) judgeStored(ctx context.Context, o *impactOptions, snapshots []string, s Streams) error {
	base := policies.NewEngine(c.base, policies.EngineOptions{Inventory: c.baseInventory})
	proposed := policies.NewEngine(c.proposed, policies.EngineOptions{Inventory: c.proposedInventory})
	judge := func(kind, source string, docs []document) error {
		nodes, others, err := storedNodes(docs, o.Namespace)
		if err != nil {
			return err
		}
		in := &inputReport{Kind: kind, Source: source}
		if others > 0 {
			in.Skipped = map[string]int{"objects that are not QuantumNodes": others}
		}
		c.inputs = append(c.inputs, in)
		for _, n := range nodes {
			c.stored(ctx, base, proposed, kind, n)
			in.Judged++
		}
		return nil
	}
	for _, file := range snapshots {
		docs, err := readSnapshot(file, s.In)
		if err != nil {
			return err
		}
		if err := judge(inputSnapshot, file, docs); err != nil {
			return err
		}
	}
	if o.Cluster {
		docs, err := listCluster(ctx, o.clusterOptions)
		if err != nil {
			return err
		}
		return judge(inputCluster, "the kubeconfig's cluster", docs)
	}
	return nil
}

// replayAuditLogs replays the audit logs in order, as one history: the
// stored objects and the rate windows carry over from one file to the
// next (rotated files, oldest first).
func (c *comparison) replayAuditLogs(ctx context.Context, files []string, namespace string, s Streams) error {
	if len(files) == 0 {
		return nil
	}
	replay := newAuditLogReplay(namespace)
	r := c.newReplayer(ctx)
	for _, file := range files {
		f, name, err := openAuditLog(file, s.In)
		if err != nil {
			return errors.Join(err, r.wait())
		}
		in := &inputReport{Kind: inputAuditLog, Source: name}
		c.inputs = append(c.inputs, in)
		err = replay.read(name, f, in, func(rep replayed) error { return r.submit(inputAuditLog, rep, in) })
		f.Close()
		if err != nil {
			if werr := r.wait(); werr != nil {
				return werr
			}
			return err
		}
	}
	return r.wait()
}

// judgeReviews judges the AdmissionReviews of a directory, in file name
// order, at t.
func (c *comparison) judgeReviews(ctx context.Context, dir string, t time.Time) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(p) {
		case ".json", ".yaml", ".yml":
			if !d.IsDir() {
				files = append(files, p)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("--reviews %s: %w", dir, unwrapPathError(err))
	}
	slices.Sort(files)
	in := &inputReport{Kind: inputReviews, Source: dir}
	c.inputs = append(c.inputs, in)
	r := c.newReplayer(ctx)
	for _, file := range files {
		doc, err := readDocument(file, nil)
		if err == nil && !isReview(doc) {
			in.skip("files that are not an AdmissionReview")
			continue
		}
		var rev *admissionv1.AdmissionReview
		if err == nil {
			rev, err = webhook.DecodeReview(doc.JSON)
		}
		if err == nil {
			in.Judged++
			err = r.submit(inputReviews, replayed{Source: file, Time: t, Request: rev.Request}, in)
		}
		if err != nil {
			if werr := r.wait(); werr != nil {
				return werr
			}
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	return r.wait()
}

// report groups the flips by role and packages, biggest news first.
func (c *comparison) report(base, proposed *policySet) *impactReport {
	r := &impactReport{
		Base:     policiesJSON{Source: base.Source, Revision: base.Set.Revision},
		Proposed: policiesJSON{Source: proposed.Source, Revision: proposed.Set.Revision},
		Inputs:   c.inputs, Totals: map[string]int{}, Groups: []*impactGroup{},
	}
	if r.Inputs == nil {
		r.Inputs = []*inputReport{}
	}
	slices.SortFunc(c.flips, func(a, b flip) int { return a.seq - b.seq })
	index := map[string]*impactGroup{}
	for _, f := range c.flips {
		key := f.Role + "\x00" + strings.Join(f.Packages, "\x00")
		g := index[key]
		if g == nil {
			g = &impactGroup{Role: f.Role, Packages: f.Packages, Totals: map[string]int{}}
			index[key] = g
			r.Groups = append(r.Groups, g)
		}
		g.Flips = append(g.Flips, f)
		for _, ch := range f.Changes {
			g.Totals[ch]++
			r.Totals[ch]++
		}
	}
	slices.SortStableFunc(r.Groups, func(a, b *impactGroup) int {
		for _, ch := range changeOrder {
			if a.Totals[ch] != b.Totals[ch] {
				return b.Totals[ch] - a.Totals[ch]
			}
		}
		if a.Role != b.Role {
			return strings.Compare(a.Role, b.Role)
		}
		return strings.Compare(strings.Join(a.Packages, ","), strings.Join(b.Packages, ","))
	})
	return r
}
