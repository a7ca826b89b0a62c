package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller/scaler"
	"github.com/quantumnode/qn-admission/policies/scalerspec"
)

// scalerOptions are the flags of qnctl scaler explain.
type scalerOptions struct {
	Value       string
	Unavailable string
	Replicas    int32
	Now         string
	Abort       []string
	Output      string
}

func newScalerCommand(s Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scaler",
		Short: "Explain what a HorizontalQNScaler would decide, offline",
	}
	cmd.AddCommand(newScalerExplainCommand(s))
	return cmd
}

func newScalerExplainCommand(s Streams) *cobra.Command {
	o := &scalerOptions{Output: outputText, Replicas: -1}
	cmd := &cobra.Command{
		Use:   "explain FILE",
		Short: "What a HorizontalQNScaler would do at a value, now: qn-controller's own decision code",
		Long: `explain reads a HorizontalQNScaler (FILE: YAML or JSON, e.g. what
'kubectl get hqs NAME -o yaml' prints, status included; - reads stdin) and
answers what qn-controller would decide at its next poll if the query
returned --value: the action, the replicas, the reason in a sentence, and
the memory the scaler would keep (scale times, stabilization, stage). The
decision is qn-controller's own function (controller/scaler.Decide), fed
the stored status as its memory, so cooldowns, the stabilization window
and a staged scale-up in progress count as they would in the cluster.

It also parses every query with the parser qn-webhook judges scalers with.

Exit codes: 0 explained, 1 a query does not parse, 2 usage error or a file
that is not a HorizontalQNScaler.`,
		Example: `  # What would it do at 12.5, now?
  kubectl get hqs orders -o yaml | qnctl scaler explain - --value 12.5

  # ... with 6 replicas, five minutes from now
  qnctl scaler explain orders.yaml --value 3 --replicas 6 --now 2026-03-01T12:05:00Z

  # ... with Prometheus down, and during a staged scale-up
  qnctl scaler explain orders.yaml --unavailable "connection refused"
  qnctl scaler explain orders.yaml --value 40 --abort error-ratio=0.007`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runScalerExplain(o, args[0], s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Value, "value", o.Value, "The value the query returns (a number).")
	f.StringVar(&o.Unavailable, "unavailable", o.Unavailable, "The query fails, with this error, instead of returning --value.")
	f.Int32Var(&o.Replicas, "replicas", o.Replicas, "The target's replicas; default status.currentReplicas.")
	f.StringVar(&o.Now, "now", o.Now, "Time of the decision (RFC 3339); default now.")
	f.StringArrayVar(&o.Abort, "abort", o.Abort, "NAME=VALUE of an abort condition of the stage in progress (repeatable); a condition not given reads as unavailable.")
	f.StringVarP(&o.Output, "output", "o", o.Output, "Output: text or json.")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion(outputText, outputJSON))
	return cmd
}

// scalerExplanation is what explain prints with -o json.
type scalerExplanation struct {
	Scaler    string                  `json:"scaler"`
	Target    string                  `json:"target"`
	Time      time.Time               `json:"time"`
	Value     string                  `json:"value,omitempty"`
	Error     string                  `json:"error,omitempty"`
	Replicas  int32                   `json:"replicas"`
	Action    qnv1alpha1.ScalerAction `json:"action"`
	ToReplica int32                   `json:"toReplicas"`
	Write     bool                    `json:"write"`
	Reason    string                  `json:"reason"`
	Limit     string                  `json:"limit,omitempty"`
	Disabled  string                  `json:"disabled,omitempty"`
	Memory    scaler.Memory           `json:"memory"`
	NextPoll  string                  `json:"nextPoll"`
	Problems  []string                `json:"queryProblems,omitempty"`
}

func runScalerExplain(o *scalerOptions, file string, s Streams) error {
	if o.Output != outputText && o.Output != outputJSON {
		return usagef("--output %q is not one of text, json", o.Output)
	}
	if (o.Value == "") == (o.Unavailable == "") {
		return usagef("give exactly one of --value and --unavailable")
	}
	sc, err := readScaler(file, s.In)
	if err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	now := time.Now()
	if o.Now != "" {
		if now, err = time.Parse(time.RFC3339, o.Now); err != nil {
			return usagef("--now %q is not an RFC 3339 time (2026-03-01T12:00:00Z): %v", o.Now, err)
		}
	}
	replicas := o.Replicas
	if replicas < 0 {
		if sc.Status.LastDecision == nil && sc.Status.CurrentReplicas == 0 {
			return usagef("%s has no status.currentReplicas: give --replicas", file)
		}
		replicas = sc.Status.CurrentReplicas
	}
	spec := scaler.WithDefaults(&sc.Spec)
	in := scaler.Input{Spec: spec, Status: &sc.Status, Now: now, Replicas: replicas, Paused: sc.Paused()}
	if o.Unavailable != "" {
		in.Metric = scaler.Reading{Err: errors.New(o.Unavailable)}
	} else {
		v, err := strconv.ParseFloat(o.Value, 64)
		if err != nil {
			return usagef("--value %q is not a number", o.Value)
		}
		in.Metric = scaler.Reading{Value: v, Text: o.Value}
	}
	given := map[string]string{}
	for _, a := range o.Abort {
		name, value, ok := strings.Cut(a, "=")
		if !ok {
			return usagef("--abort %q is not NAME=VALUE", a)
		}
		given[name] = value
	}
	conditions := scaler.StageConditions(spec, &sc.Status)
	for name := range given {
		if !hasCondition(conditions, name) {
			return usagef("--abort %s: the stage in progress has no abort condition of that name (it has %s)", name, conditionNames(conditions))
		}
	}
	for _, c := range conditions {
		r := scaler.Reading{Err: errors.New("not given (--abort " + c.Name + "=VALUE)")}
		if text, ok := given[c.Name]; ok {
			v, err := strconv.ParseFloat(text, 64)
			if err != nil {
				return usagef("--abort %s=%s: not a number", c.Name, text)
			}
			r = scaler.Reading{Value: v, Text: text}
		}
		in.Abort = append(in.Abort, scaler.ConditionReading{Condition: c, Reading: r})
	}
	d := scaler.Decide(in)

	ref := spec.ScaleTargetRef
	ex := scalerExplanation{
		Scaler: sc.Namespace + "/" + sc.Name, Target: ref.Kind + " " + ref.Name + " (" + ref.APIVersion + ")",
		Time: now.UTC(), Value: in.Metric.Text, Replicas: replicas,
		Action: d.Action, ToReplica: d.Replicas, Write: d.Write(replicas) && !spec.DryRun, Reason: d.Reason,
		Limit: string(d.Limit), Disabled: d.Disabled, Memory: d.Next,
		NextPoll: scaler.PollingInterval(spec).String(),
		Problems: scalerspec.CheckQueries(sc, nil),
	}
	if in.Metric.Err != nil {
		ex.Error = in.Metric.Err.Error()
	}
	if o.Output == outputJSON {
		js, err := json.MarshalIndent(ex, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(s.Out, "%s\n", js)
	} else {
		printScalerExplanation(s.Out, ex, spec)
	}
	if len(ex.Problems) > 0 {
		return failed()
	}
	return nil
}

func printScalerExplanation(w io.Writer, ex scalerExplanation, spec *qnv1alpha1.HorizontalQNScalerSpec) {
	value := ex.Value
	if ex.Error != "" {
		value = "unavailable: " + ex.Error
	}
	fmt.Fprintf(w, "HorizontalQNScaler %s → %s\n", ex.Scaler, ex.Target)
	fmt.Fprintf(w, "  at          %s\n", ex.Time.Format(time.RFC3339))
	fmt.Fprintf(w, "  value       %s (lower %s, upper %s)\n", value,
		scaler.FormatNumber(spec.Thresholds.Lower.AsApproximateFloat64()), scaler.FormatNumber(spec.Thresholds.Upper.AsApproximateFloat64()))
	fmt.Fprintf(w, "  replicas    %d (min %d, max %d; steps +%d / -%d)\n", ex.Replicas, spec.MinReplicas, spec.MaxReplicas, spec.ScaleUpStep, spec.ScaleDownStep)
	fmt.Fprintf(w, "  decision    %s: %s\n", ex.Action, ex.Reason)
	switch {
	case !ex.Write && ex.ToReplica != ex.Replicas:
		fmt.Fprintf(w, "  writes      nothing: dry run (it would set %d replicas)\n", ex.ToReplica)
	case ex.Write:
		fmt.Fprintf(w, "  writes      %d replicas to the target's /scale\n", ex.ToReplica)
	default:
		fmt.Fprintf(w, "  writes      nothing\n")
	}
	if ex.Limit != "" {
		fmt.Fprintf(w, "  limited     %s\n", ex.Limit)
	}
	fmt.Fprintf(w, "  remembers   %s\n", memoryLine(ex.Memory))
	fmt.Fprintf(w, "  next poll   in %s\n", ex.NextPoll)
	for _, p := range ex.Problems {
		fmt.Fprintf(w, "  query       does not parse: %s\n", p)
	}
}

func memoryLine(m scaler.Memory) string {
	var parts []string
	for _, t := range []struct {
		name string
		at   *metav1.Time
	}{{"lastScaleTime", m.LastScaleTime}, {"lastScaleUpTime", m.LastScaleUpTime}, {"belowLowerSince", m.BelowLowerSince}} {
		if t.at != nil {
			parts = append(parts, t.name+" "+t.at.UTC().Format(time.RFC3339))
		}
	}
	if m.MetricFailures > 0 {
		parts = append(parts, fmt.Sprintf("metricFailures %d", m.MetricFailures))
	}
	if st := m.Stage; st != nil {
		parts = append(parts, fmt.Sprintf("stage %d of %d at %d replicas (from %d to %d, since %s)", st.Index, st.Count, st.Replicas, st.BaseReplicas, st.TargetReplicas, st.StartTime.UTC().Format(time.RFC3339)))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

func hasCondition(cs []qnv1alpha1.AbortCondition, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return true
		}
	}
	return false
}

func conditionNames(cs []qnv1alpha1.AbortCondition) string {
	if len(cs) == 0 {
		return "none: no staged scale-up is in progress"
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// readScaler reads one HorizontalQNScaler, strictly: an unknown field is
// an error that names it.
func readScaler(file string, stdin io.Reader) (*qnv1alpha1.HorizontalQNScaler, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s is not YAML or JSON: %v", file, err)
	}
	sc := &qnv1alpha1.HorizontalQNScaler{}
	strict, err := sigsjson.UnmarshalStrict(js, sc)
	if err != nil {
		return nil, fmt.Errorf("%s is not a HorizontalQNScaler: %v", file, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s is not a HorizontalQNScaler: %v", file, errors.Join(strict...))
	}
	if gvk := sc.GroupVersionKind(); gvk != qnv1alpha1.ScalerGroupVersionKind {
		return nil, fmt.Errorf("%s is apiVersion %q kind %q, not %s", file, sc.APIVersion, sc.Kind, qnv1alpha1.ScalerGroupVersionKind)
	}
	return sc, nil
}
