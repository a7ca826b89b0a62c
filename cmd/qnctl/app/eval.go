package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/lineage"
	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/internal/words"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/webhook"
)

// Output formats of eval.
const (
	outputText   = "text"
	outputJSON   = "json"
	outputYAML   = "yaml"
	outputReview = "review"
	outputJUnit  = "junit"
)

// Trace filters of --trace, as opa eval --explain names them.
var traceModes = map[string]func([]*topdown.Event) []*topdown.Event{
	"full":  lineage.Full,
	"fails": lineage.Fails,
	"notes": lineage.Notes,
}

// evalOptions are the flags of qnctl eval.
type evalOptions struct {
	PolicyDir     string
	Operation     string
	User          string
	Groups        []string
	Namespace     string
	Resource      string
	Role          string
	OldRole       string
	Old           string
	Time          string
	WindowCount   int
	DryRun        bool
	Webhook       string
	Output        string
	ShowPatched   bool
	Explain       bool
	Trace         string
	SkipRegoTests bool
	AllowEmpty    bool
	// AdditionalResources are the chart's webhook.additionalResources, as
	// qn-webhook's --additional-resources takes them.
	AdditionalResources []string
	additional          []webhook.AdditionalResource
}

func newEvalCommand(opts *commonOptions, s Streams) *cobra.Command {
	o := &evalOptions{Webhook: webhookBoth, Output: outputText}
	cmd := &cobra.Command{
		Use:   "eval FILE",
		Short: "Answer an AdmissionReview or an object exactly as qn-webhook would",
		Long: `eval judges one request with the engine qn-webhook runs and prints the
answer the webhook would send: allowed, code, message, warnings and, from the
mutating webhook, the JSONPatch.

FILE (JSON or YAML; - reads stdin) is an admission.k8s.io/v1 AdmissionReview,
or a plain object (a QuantumNode) that qnctl wraps in a review the way the
apiserver does, completed by --operation, --user, --group, --namespace and
--old. For a review, the same flags override its fields. --role sets the
qn-role annotation on the object, as if the user had written it.

By default the mutating webhook answers first and the validating webhook then
judges the patched object, as the apiserver calls them (--webhook picks one).

--explain says which role was chosen and why, whether the role may perform the
operation, the requester's rate window, which packages ran and which rule (file
and line) produced each deny, warn and patch entry; --trace adds the Rego trace.

A HorizontalQNScaler is judged as qn-webhook's /validate judges it (its
PromQL queries must parse), by the validating webhook only: the chart
registers no mutating webhook for scalers. Requests qn-webhook is not
registered for (a Pod, a Deployment, a scaler's DELETE) are answered too,
but the API server never sends them to it: they are named as not checked,
and when nothing else was given the exit code is 2 (--allow-empty accepts
that). A release that registers the validating webhook for more resources
(the chart's webhook.additionalResources) is given the same list with
--additional-resources, as the chart gives it to qn-webhook: those requests
are then judged by the validating webhook only, as the API server sends
them.

Exit codes: 0 allowed, 1 denied, 2 usage error, bad input, a policy
directory that does not load, or no request qn-webhook is registered for.`,
		Example: `  # A QuantumNode created by alice, judged by the bundled policies
  qnctl eval node.yaml --user alice --group edge-ops

  # The same object under the realtime role, with an explanation
  qnctl eval node.yaml --role realtime --explain

  # An UPDATE against its old object, with your own policies
  qnctl eval new.yaml --old old.yaml --policy-dir ./policies

  # The 121st change in a minute for a realtime user: 429 from the rate window
  qnctl eval node.yaml --role realtime --window-count 120

  # A review captured from the apiserver, answered as qn-webhook would (wire JSON)
  qnctl eval review.json --webhook validate -o review

  # Why was it denied, rule by rule, with the failing expressions of the Rego trace
  qnctl eval review.json --explain --trace=fails

  # A Pod, in a release whose values register the webhook for Pods too
  # (webhook.additionalResources: [{apiGroups: [""], apiVersions: [v1], resources: [pods]}])
  qnctl eval pod.yaml --policy-dir ./policies --additional-resources pods.v1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEval(cmd.Context(), opts, o, args[0], cmd.Flags().Changed, s)
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"yaml", "yml", "json"}, cobra.ShellCompDirectiveFilterFileExt
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.PolicyDir, "policy-dir", o.PolicyDir, "Policy directory (roles.yaml, *.rego, data.json|yaml); default: the bundled policies.")
	f.StringVar(&o.Operation, "operation", o.Operation, "Operation: CREATE, UPDATE, DELETE or CONNECT (default CREATE, or UPDATE with --old).")
	f.StringVar(&o.User, "user", defaultUser, "Requesting user (userInfo.username).")
	f.StringArrayVar(&o.Groups, "group", nil, "Group of the requesting user; repeat for several (default system:authenticated).")
	f.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "Namespace of the request (default: the object's, else default).")
	f.StringVar(&o.Resource, "resource", o.Resource, "Resource of a plain object (default: quantumnodes for a QuantumNode, else the kind's plural).")
	f.StringVar(&o.Role, "role", o.Role, "Role to judge under: sets the qn-role annotation on the object (overrides the one it has).")
	f.StringVar(&o.OldRole, "old-role", o.OldRole, "With --old: sets the qn-role annotation on the old object, the role of the stored object that judges an UPDATE (to try a change of role).")
	f.StringVar(&o.Old, "old", o.Old, "Old object (JSON or YAML) for an UPDATE.")
	f.StringVar(&o.Time, "time", o.Time, "Time of the request, RFC 3339 (default now).")
	f.IntVar(&o.WindowCount, "window-count", 0, "Changes the requester already made in the role's rate window, as if made at --time.")
	f.BoolVar(&o.DryRun, "dry-run", false, "Mark the request as a dry run (it takes no slot of the rate window).")
	f.StringVar(&o.Webhook, "webhook", o.Webhook, "Webhooks to ask: both (mutate, then validate the patched object), validate or mutate.")
	f.StringVarP(&o.Output, "output", "o", o.Output, "Output: text, json, yaml, or review (the webhooks' response bodies, one line each, byte for byte).")
	f.BoolVar(&o.ShowPatched, "show-patched", false, "Also print the object after the mutating webhook's patch.")
	f.BoolVar(&o.Explain, "explain", false, "Explain the decision: role, operation, window, packages, and the rule (file:line) behind each entry.")
	f.StringVar(&o.Trace, "trace", "", "With the explanation, print the Rego trace: full, fails or notes (implies --explain).")
	f.Lookup("trace").NoOptDefVal = "full"
	f.BoolVar(&o.AllowEmpty, "allow-empty", false, "Exit by the answers even when no request is one qn-webhook is registered for (the API server never sends it the others).")
	f.StringArrayVar(&o.AdditionalResources, "additional-resources", nil, "A resource besides QuantumNodes the release registers the validating webhook for (the chart's webhook.additionalResources), as qn-webhook takes it: RESOURCE.VERSION[.GROUP][:OPERATION,...], e.g. pods.v1 or deployments.v1.apps:CREATE,UPDATE (CREATE,UPDATE when none); repeat for several. Its requests are then checked, by the validating webhook only.")
	f.BoolVar(&o.SkipRegoTests, "skip-rego-tests", false, "Load the policies without running their Rego unit tests (qn-webhook refuses a set whose tests fail).")
	_ = cmd.MarkFlagFilename("old", "yaml", "yml", "json")
	_ = cmd.MarkFlagDirname("policy-dir")
	_ = cmd.RegisterFlagCompletionFunc("operation", fixedCompletion(operations...))
	_ = cmd.RegisterFlagCompletionFunc("webhook", fixedCompletion(webhookModes...))
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON, outputYAML, outputReview))
	_ = cmd.RegisterFlagCompletionFunc("trace", fixedCompletion("full", "fails", "notes"))
	_ = cmd.RegisterFlagCompletionFunc("role", roleCompletion(opts))
	return cmd
}

// fixedCompletion completes a flag from a fixed list.
func fixedCompletion(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// roleCompletion completes --role from the role table of --policy-dir.
func roleCompletion(opts *commonOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		dir, _ := cmd.Flags().GetString("policy-dir")
		p, err := loadPolicies(cmd.Context(), dir, opts, true)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return p.Set.Roles.Names(), cobra.ShellCompDirectiveNoFileComp
	}
}

// validate checks the flags that need no input.
func (o *evalOptions) validate() (time.Time, error) {
	switch o.Output {
	case outputText, outputJSON, outputYAML, outputReview:
	default:
		return time.Time{}, usagef("--output %q is not one of text, json, yaml, review", o.Output)
	}
	if !contains(webhookModes, o.Webhook) {
		return time.Time{}, usagef("--webhook %q is not one of %s", o.Webhook, strings.Join(webhookModes, ", "))
	}
	if o.Trace != "" {
		if _, ok := traceModes[o.Trace]; !ok {
			return time.Time{}, usagef("--trace %q is not one of full, fails, notes", o.Trace)
		}
		o.Explain = true
	}
	if o.WindowCount < 0 {
		return time.Time{}, usagef("--window-count %d is negative; give the number of changes already made", o.WindowCount)
	}
	additional, err := webhook.ParseAdditionalResources(o.AdditionalResources)
	if err != nil {
		return time.Time{}, usagef("--additional-resources: %v", err)
	}
	o.additional = additional
	if o.Operation != "" {
		if _, err := parseOperation(o.Operation); err != nil {
			return time.Time{}, err
		}
	}
	if o.Time == "" {
		return time.Now().UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, o.Time)
	if err != nil {
		return time.Time{}, usagef("--time %q is not an RFC 3339 time (e.g. 2026-03-01T10:00:00Z)", o.Time)
	}
	return t, nil
}

func runEval(ctx context.Context, opts *commonOptions, o *evalOptions, file string, changed func(string) bool, s Streams) error {
	now, err := o.validate()
	if err != nil {
		return err
	}
	inputs, err := readDocuments(file, s.In)
	if err != nil {
		return err
	}
	base := requestSpec{Operation: o.Operation, Namespace: o.Namespace, Resource: o.Resource, Role: o.Role, OldRole: o.OldRole}
	if changed("user") {
		base.User = &o.User
	}
	if changed("group") {
		base.Groups = o.Groups
	}
	if changed("dry-run") {
		base.DryRun = &o.DryRun
	}
	if o.Old != "" {
		if len(inputs) > 1 {
			return usagef("--old judges one UPDATE; %s holds %d objects", file, len(inputs))
		}
		old, err := readDocument(o.Old, s.In)
		if err != nil {
			return err
		}
		base.Old = &old
	}
	p, err := loadPolicies(ctx, o.PolicyDir, opts, o.SkipRegoTests)
	if err != nil {
		return err
	}
	if err := checkRole(p, o.Role); err != nil {
		return err
	}
	p.warnWithoutInventory(s.Err)
	// Each object of a List or a YAML stream is judged on its own, as
	// the server judges each object kubectl sends; any denial fails.
	outcomes := make([]*outcome, 0, len(inputs))
	var ungoverned []string
	for _, input := range inputs {
		spec := base
		spec.Input = input
		review, err := spec.reviewBytes()
		if err != nil {
			return err
		}
		hooks := o.Webhook
		if kind, registered, ok := registration(review, o.Webhook, o.additional); !ok {
			ungoverned = append(ungoverned, fmt.Sprintf("%s (%s)", input.Name, kind))
		} else {
			hooks = registered
		}
		out, err := evaluate(ctx, p.Set, evalRequest{Review: review, Webhook: hooks, Now: now, WindowCount: o.WindowCount, Explain: o.Explain, Inventory: p.Inventory})
		if err != nil {
			return fmt.Errorf("%s: %w", input.Name, err)
		}
		out.Source = input.Name
		outcomes = append(outcomes, out)
	}
	if err := writeEvals(s.Out, p, outcomes, o); err != nil {
		return err
	}
	if len(ungoverned) > 0 {
		fmt.Fprintf(s.Err, "not checked: %s: %s; the API server never sends it these requests, whatever the answers above say\n", strings.Join(ungoverned, ", "), webhook.RegisteredFor(o.additional))
		if len(ungoverned) == len(outcomes) && !o.AllowEmpty {
			return &exitError{code: exitBadInput, err: fmt.Errorf("nothing was checked: no request is one qn-webhook is registered for; --allow-empty exits by the answers anyway")}
		}
	}
	for _, out := range outcomes {
		if !out.final().Decision.Allowed {
			return failed()
		}
	}
	return nil
}

// writeStructured prints v as indented JSON, or as YAML for -o yaml.
func writeStructured(w io.Writer, v any, output string) error {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if output == outputYAML {
		if js, err = yaml.JSONToYAML(js); err != nil {
			return err
		}
		_, err = w.Write(js)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", js)
	return err
}

// writeEvals prints one answer, or, for several objects, each under the
// name of where it stands and a count at the end (text), or all of them as
// one list (json, yaml).
func writeEvals(w io.Writer, p *policySet, outs []*outcome, o *evalOptions) error {
	if len(outs) == 1 {
		return writeEval(w, p, outs[0], o)
	}
	switch o.Output {
	case outputJSON, outputYAML:
		docs := make([]any, 0, len(outs))
		for _, out := range outs {
			doc, err := evalDocument(p, out, o)
			if err != nil {
				return err
			}
			docs = append(docs, map[string]any{"source": out.Source, "result": doc})
		}
		return writeStructured(w, docs, o.Output)
	case outputReview:
		for _, out := range outs {
			if err := writeEval(w, p, out, o); err != nil {
				return err
			}
		}
		return nil
	}
	denied := 0
	for i, out := range outs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "== %s\n", out.Source)
		if err := writeEval(w, p, out, o); err != nil {
			return err
		}
		if !out.final().Decision.Allowed {
			denied++
		}
	}
	_, err := fmt.Fprintf(w, "\n%s: %d admitted, %d denied\n", words.Count(len(outs), "object"), len(outs)-denied, denied)
	return err
}

// checkRole refuses a --role (or fixture role) the role table lacks: a
// mistake in the command line, not a decision to report.
func checkRole(p *policySet, role string) error {
	if role == "" {
		return nil
	}
	if _, ok := p.Set.Roles.Roles[role]; ok {
		return nil
	}
	return usagef("role %q is not in %s (%s); known roles: %s", role, policies.RolesFile, p.Source, strings.Join(p.Set.Roles.Names(), ", "))
}

func writeEval(w io.Writer, p *policySet, out *outcome, o *evalOptions) error {
	switch o.Output {
	case outputReview:
		for _, a := range []*webhookAnswer{out.Mutate, out.Validate} {
			if a != nil {
				if _, err := fmt.Fprintf(w, "%s\n", a.Wire); err != nil {
					return err
				}
			}
		}
		return nil
	case outputJSON, outputYAML:
		doc, err := evalDocument(p, out, o)
		if err != nil {
			return err
		}
		return writeStructured(w, doc, o.Output)
	default:
		return writeEvalText(w, p, out, o)
	}
}

// answerJSON is one webhook's answer in -o json|yaml: the decision's
// fields, then the response exactly as sent.
type answerJSON struct {
	Webhook   string                       `json:"webhook"`
	Allowed   bool                         `json:"allowed"`
	Code      int32                        `json:"code"`
	Reason    string                       `json:"reason,omitempty"`
	Message   string                       `json:"message,omitempty"`
	Warnings  []string                     `json:"warnings,omitempty"`
	Patch     json.RawMessage              `json:"patch,omitempty"`
	Role      string                       `json:"role,omitempty"`
	Revision  string                       `json:"revision,omitempty"`
	Exempt    string                       `json:"exempt,omitempty"`
	Reasons   []string                     `json:"reasons,omitempty"`
	WouldDeny []string                     `json:"wouldDeny,omitempty"`
	Window    *policies.WindowState        `json:"window,omitempty"`
	Explain   *explainJSON                 `json:"explanation,omitempty"`
	Review    *admissionv1.AdmissionReview `json:"review"`
}

type evalJSON struct {
	Policies      policiesJSON    `json:"policies"`
	Allowed       bool            `json:"allowed"`
	Mutate        *answerJSON     `json:"mutate,omitempty"`
	Validate      *answerJSON     `json:"validate,omitempty"`
	PatchedObject json.RawMessage `json:"patchedObject,omitempty"`
}

type policiesJSON struct {
	Source   string `json:"source"`
	Revision string `json:"revision"`
}

func evalDocument(p *policySet, out *outcome, o *evalOptions) (*evalJSON, error) {
	doc := &evalJSON{
		Policies: policiesJSON{Source: p.Source, Revision: p.Set.Revision},
		Allowed:  out.final().Decision.Allowed,
	}
	for _, a := range []*webhookAnswer{out.Mutate, out.Validate} {
		if a == nil {
			continue
		}
		d := a.Decision
		aj := &answerJSON{
			Webhook: a.Webhook, Allowed: d.Allowed, Code: d.Code, Reason: string(d.Reason), Message: d.Message,
			Warnings: d.Warnings, Patch: d.Patch, Role: d.Role, Revision: d.Revision, Exempt: d.Exempt,
			Reasons: d.Reasons, WouldDeny: d.WouldDeny, Window: d.Window, Review: a.Review,
		}
		if o.Explain && a.Explanation != nil {
			aj.Explain = explanationJSON(p, a, o.Trace)
		}
		if a.Webhook == webhookMutate {
			doc.Mutate = aj
		} else {
			doc.Validate = aj
		}
	}
	if o.ShowPatched && len(out.Patched) > 0 {
		doc.PatchedObject = out.Patched
	}
	return doc, nil
}

func writeEvalText(w io.Writer, p *policySet, out *outcome, o *evalOptions) error {
	tw := &textWriter{w: w}
	for _, a := range []*webhookAnswer{out.Mutate, out.Validate} {
		if a == nil {
			continue
		}
		if o.Explain {
			writeExplanation(tw, p, a, o.Trace)
		} else {
			writeAnswer(tw, a)
		}
	}
	if o.ShowPatched && len(out.Patched) > 0 {
		y, err := yaml.JSONToYAML(out.Patched)
		if err != nil {
			return fmt.Errorf("print patched object: %w", err)
		}
		tw.line("patched object:")
		for _, l := range strings.Split(strings.TrimRight(string(y), "\n"), "\n") {
			tw.line("  " + l)
		}
	}
	return tw.err
}

// webhookTitle is how text output names a webhook.
func webhookTitle(name string) string {
	if name == webhookMutate {
		return "mutating webhook"
	}
	return "validating webhook"
}

// verdict is "allowed (200)" or "DENIED (403 Forbidden)".
func verdict(d policies.Decision) string {
	if d.Allowed {
		return fmt.Sprintf("allowed (%d)", d.Code)
	}
	if d.Reason != "" {
		return fmt.Sprintf("DENIED (%d %s)", d.Code, d.Reason)
	}
	return fmt.Sprintf("DENIED (%d)", d.Code)
}

// writeAnswer prints one webhook's answer as the user sees it.
func writeAnswer(tw *textWriter, a *webhookAnswer) {
	d := a.Decision
	tw.line(webhookTitle(a.Webhook) + ": " + verdict(d))
	if d.Exempt != "" {
		tw.field("exempt", d.Exempt+" (admitted without policies)")
	}
	if d.Role != "" {
		tw.field("role", fmt.Sprintf("%s (policy revision %s)", d.Role, d.Revision))
	}
	if d.Message != "" {
		tw.field("message", d.Message)
	}
	writeDetails(tw, d, answerIsDryRun(a))
}

// windowAfter describes the window after the request: took says whether
// the request took a slot (an admitted change that is no dry run); a
// refused change and a dry run take none.
func windowAfter(w *policies.WindowState, took, dryRun bool) string {
	used := fmt.Sprintf("%s window: %d of %d changes per %s used", w.Key, w.Count, w.Limit, seconds(w.PeriodSeconds))
	switch {
	case took:
		return fmt.Sprintf("%s after this request, %d remaining", used, w.Remaining)
	case dryRun:
		return fmt.Sprintf("%s; this dry run took no slot, %d remaining", used, w.Remaining)
	default:
		return fmt.Sprintf("%s; this refused change took no slot, %d remaining", used, w.Remaining)
	}
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).String()
}

// textWriter writes aligned "  label  value" lines and keeps the first error.
type textWriter struct {
	w   io.Writer
	err error
}

// line prints s as one line of text: control characters and bytes that are
// not UTF-8 (a binary fixture, a crafted message) are written as Go escapes,
// so they cannot move the cursor, recolour or garble a terminal.
func (t *textWriter) line(s string) {
	if t.err == nil {
		_, t.err = fmt.Fprintln(t.w, printable(s))
	}
}

// printableLines is printable for each line of a multi-line message.
func printableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n")
}

// printable escapes what a terminal would interpret; plain text, tabs
// included, is returned as it is.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && r != '\t') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unicode.IsControl(r) && r != '\t':
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// field prints a labelled value; continuation lines are indented under it.
func (t *textWriter) field(label, value string) {
	const width = 12
	pad := strings.Repeat(" ", max(1, width-len(label)))
	lines := strings.Split(value, "\n")
	t.line("  " + label + pad + lines[0])
	for _, l := range lines[1:] {
		t.line("  " + strings.Repeat(" ", len(label)+len(pad)) + l)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// registration says whether the chart registers qn-webhook for a review
// (its kind and operation, or for the additional resources its resource),
// names its kind, and says which of the asked webhooks (both, validate,
// mutate) the API server would call: a HorizontalQNScaler and an
// additional resource are sent to the validating webhook only, so "both"
// asks that one. webhook.RegisteredFor says the same in words
// (charts/qn-admission/templates/webhook).
func registration(review []byte, asked string, additional []webhook.AdditionalResource) (kind, hooks string, ok bool) {
	var rev struct {
		Request struct {
			Kind        struct{ Group, Kind string }     `json:"kind"`
			Resource    struct{ Group, Resource string } `json:"resource"`
			SubResource string                           `json:"subResource"`
			Operation   string                           `json:"operation"`
		} `json:"request"`
	}
	_ = json.Unmarshal(review, &rev)
	k := rev.Request.Kind
	kind = k.Kind
	if k.Group != "" {
		kind = k.Group + "/" + k.Kind
	}
	switch {
	case k.Group == qnv1alpha1.Group && k.Kind == qnv1alpha1.Kind:
		return kind, asked, true
	case k.Group == qnv1alpha1.Group && k.Kind == qnv1alpha1.ScalerKind:
		op := rev.Request.Operation
		if asked == webhookMutate || (op != "CREATE" && op != "UPDATE") {
			return kind + " " + op, asked, false
		}
		return kind, webhookValidate, true
	}
	req := rev.Request
	for _, r := range additional {
		if r.Covers(req.Resource.Group, req.Resource.Resource, req.SubResource, req.Operation) {
			if asked == webhookMutate {
				return kind + " (validating webhook only)", asked, false
			}
			return kind, webhookValidate, true
		}
	}
	return kind, asked, false
}
