package load

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quantumnode/qn-admission/test/harness"
)

// Metric names of the shadow and of the webhook's answers.
const (
	MetricRequests      = "qn_admission_requests_total"
	MetricShadowJudged  = "qn_admission_shadow_evaluations_total"
	MetricShadowDropped = "qn_admission_shadow_dropped_total"
	MetricShadowDiffers = "qn_admission_shadow_disagreements_total"
)

// WriteShadowCandidate writes into dir the candidate policy set the shadow
// targets judge with: the bundled policies with a change a team could
// propose, that tightens one rule and loosens another. The default role
// also refuses port 22 (SSH) in package qn.candidate.ssh: the served set
// only warns about it, as about any port below 1024. The realtime role's
// latency budget rises from 50 to 100 ms.
func WriteShadowCandidate(dir string) error {
	if err := harness.WriteBundledPolicies(dir); err != nil {
		return err
	}
	// The change updates the policy tests too: a set whose tests fail
	// does not load.
	if err := replaceInFile(filepath.Join(dir, "roles.yaml"),
		"packages: [qn.quantumnode, qn.window, qn.mutate.managedby]", "packages: [qn.quantumnode, qn.candidate.ssh, qn.window, qn.mutate.managedby]",
		"maxLatencyBudgetMs: 50", "maxLatencyBudgetMs: 100"); err != nil {
		return err
	}
	if err := replaceInFile(filepath.Join(dir, "roles_test.rego"),
		`"qn.dev/latency-budget-ms": "50"})`, `"qn.dev/latency-budget-ms": "100"})`,
		"latency budget 50 ms", "latency budget 100 ms",
		"maximum of 50 ms", "maximum of 100 ms",
		`"49.5"`, `"99.5"`,
		"below 50)", "below 100)"); err != nil {
		return err
	}
	const closePort22 = `package qn.candidate.ssh

import data.qn.quantumnode

# The edge firewall closes port 22: nodes must not plan to serve on it.
deny contains msg if {
	quantumnode.judged
	some i, svc in quantumnode.services
	svc.port == 22
	msg := sprintf("spec.services[%d] (%v) uses port 22, which the edge firewall closes", [i, svc.name])
}
`
	const closePort22Test = `package qn.candidate.ssh_test

import data.qn.candidate.ssh

test_port_22_is_refused if {
	ssh.deny["spec.services[1] (ssh) uses port 22, which the edge firewall closes"] with input as {"request": {
		"kind": {"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
		"operation": "CREATE",
		"object": {"spec": {"services": [{"name": "web", "port": 8080}, {"name": "ssh", "port": 22}]}},
	}}
}
`
	if err := os.WriteFile(filepath.Join(dir, "candidate_ssh.rego"), []byte(closePort22), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "candidate_ssh_test.rego"), []byte(closePort22Test), 0o644)
}

// replaceInFile replaces each old string of file, which must hold it, with
// its new one (pairs: old, new, old, new …).
func replaceInFile(file string, pairs ...string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(string(data), pairs[i]) {
			return fmt.Errorf("the bundled %s no longer holds %q: update WriteShadowCandidate", file, pairs[i])
		}
	}
	return os.WriteFile(file, []byte(strings.NewReplacer(pairs...).Replace(string(data))), 0o644)
}

// StartWebhookShadow is StartWebhookWithEnv with --shadow-policy-dir
// candidate (the rest of the shadow's settings at their defaults). It returns once
// the candidate set has loaded, and its answers are checked to name the
// served set's revision: never the candidate's.
func StartWebhookShadow(name, bin, certDir, candidate string, env []string, extra ...string) (*Server, error) {
	s, err := StartWebhookWithEnv(name, bin, certDir, env, append([]string{"--shadow-policy-dir", candidate}, extra...)...)
	if err != nil {
		return nil, err
	}
	if err := harness.Eventually(context.Background(), 30*time.Second, func() error {
		if s.ShadowRevision = s.LogField("shadow policies loaded", "revision"); s.ShadowRevision == "" {
			return fmt.Errorf("%s has not loaded the candidate set in %s", name, candidate)
		}
		return nil
	}); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("%w:\n%s", err, s.Logs())
	}
	s.Revision = s.LogField("policies loaded", "revision")
	if s.Revision == "" || s.Revision == s.ShadowRevision {
		_ = s.Stop()
		return nil, fmt.Errorf("%s: served revision %q, candidate revision %q: want two different sets:\n%s", name, s.Revision, s.ShadowRevision, s.Logs())
	}
	return s, nil
}

// ShadowCounts are a shadowed server's counters: requests answered, and
// of them judged by the shadow, dropped (not judged) and judged
// differently.
type ShadowCounts struct {
	Answered, Judged, Dropped, Disagreed int
}

// Sub is c - d, for the counts of one slice.
func (c ShadowCounts) Sub(d ShadowCounts) ShadowCounts {
	return ShadowCounts{c.Answered - d.Answered, c.Judged - d.Judged, c.Dropped - d.Dropped, c.Disagreed - d.Disagreed}
}

// Add is c + d.
func (c ShadowCounts) Add(d ShadowCounts) ShadowCounts {
	return ShadowCounts{c.Answered + d.Answered, c.Judged + d.Judged, c.Dropped + d.Dropped, c.Disagreed + d.Disagreed}
}

// Settled says the shadow has judged or dropped every answered request.
func (c ShadowCounts) Settled() bool { return c.Judged+c.Dropped >= c.Answered }

// ShadowCounts reads the server's counters from its /metrics.
func (s *Server) ShadowCounts(ctx context.Context) (ShadowCounts, error) {
	m, err := s.Metrics(ctx)
	if err != nil {
		return ShadowCounts{}, err
	}
	return ShadowCounts{
		Answered:  int(m.Sum(MetricRequests, nil)),
		Judged:    int(m.Sum(MetricShadowJudged, nil)),
		Dropped:   int(m.Sum(MetricShadowDropped, nil)),
		Disagreed: int(m.Sum(MetricShadowDiffers, nil)),
	}, nil
}

// WaitShadow waits until the shadow has judged or dropped every request
// the server answered since base, and returns the counts since base.
func (s *Server) WaitShadow(ctx context.Context, base ShadowCounts, timeout time.Duration) (ShadowCounts, error) {
	var got ShadowCounts
	err := harness.Eventually(ctx, timeout, func() error {
		now, err := s.ShadowCounts(ctx)
		if err != nil {
			return err
		}
		if got = now.Sub(base); !got.Settled() {
			return fmt.Errorf("%s: of %d answered requests the shadow judged %d and dropped %d", s.Name, got.Answered, got.Judged, got.Dropped)
		}
		return nil
	})
	return got, err
}

// Metrics is a scrape of a server's /metrics.
type Metrics map[string]*dto.MetricFamily

// Metrics scrapes the server's /metrics.
func (s *Server) Metrics(ctx context.Context) (Metrics, error) {
	var families map[string]*dto.MetricFamily
	err := s.getProbe(ctx, "/metrics", func(body io.Reader) (err error) {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err = parser.TextToMetricFamilies(body)
		return err
	})
	return Metrics(families), err
}

// Readiness is the body of the server's /readyz?verbose.
func (s *Server) Readiness(ctx context.Context) (string, error) {
	var text string
	err := s.getProbe(ctx, "/readyz?verbose", func(body io.Reader) error {
		b, err := io.ReadAll(body)
		text = string(b)
		return err
	})
	return text, err
}

// getProbe reads path from qn-webhook's probe listener with read.
func (s *Server) getProbe(ctx context.Context, path string, read func(io.Reader) error) error {
	if s.probe == "" {
		return fmt.Errorf("%s has no probe listener", s.Name)
	}
	url := s.probe + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: GET %s: HTTP %d", s.Name, url, resp.StatusCode)
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("%s: GET %s: %w", s.Name, url, err)
	}
	return nil
}

// Sum adds up the counters and gauges of metric name whose labels include
// every one of labels.
func (m Metrics) Sum(name string, labels map[string]string) float64 {
	sum := 0.0
	for _, series := range m.Series(name) {
		if series.matches(labels) {
			sum += series.Value
		}
	}
	return sum
}

// Series is one sample of a metric: its labels and value.
type Series struct {
	Labels map[string]string
	Value  float64
}

func (s Series) matches(labels map[string]string) bool {
	for k, v := range labels {
		if s.Labels[k] != v {
			return false
		}
	}
	return true
}

// Series lists the counter and gauge samples of metric name.
func (m Metrics) Series(name string) []Series {
	f := m[name]
	if f == nil {
		return nil
	}
	out := make([]Series, 0, len(f.GetMetric()))
	for _, metric := range f.GetMetric() {
		s := Series{Labels: map[string]string{}}
		for _, l := range metric.GetLabel() {
			s.Labels[l.GetName()] = l.GetValue()
		}
		switch {
		case metric.Counter != nil:
			s.Value = metric.GetCounter().GetValue()
		case metric.Gauge != nil:
			s.Value = metric.GetGauge().GetValue()
		default:
			continue
		}
		out = append(out, s)
	}
	return out
}

// RoundRatios summarise one figure of a target over another's, round by
// round (each round's slices ran back to back).
type RoundRatios struct {
	Median, Min, Max float64
	Rounds           int
}

func newRoundRatios(rs []float64) RoundRatios {
	return RoundRatios{Median: median(rs), Min: extreme(rs, false), Max: extreme(rs, true), Rounds: len(rs)}
}

func (r RoundRatios) String() string {
	return fmt.Sprintf("%.2f× (%.2f–%.2f×)", r.Median, r.Min, r.Max)
}

// minNoiseRounds is the fewest rounds that tell a difference from noise:
// with 3, all rounds on one side happens by chance one time in four.
const minNoiseRounds = 3

// WithinNoise says the figure was lower with the first target in some
// rounds and higher in others: no difference the machine's own noise
// does not also make. Nil with too few rounds to tell.
func (r RoundRatios) WithinNoise() *bool {
	if r.Rounds < minNoiseRounds {
		return nil
	}
	return verdict(r.Min <= 1 && r.Max >= 1)
}

// Verdict says WithinNoise in words.
func (r RoundRatios) Verdict() string {
	switch w := r.WithinNoise(); {
	case w == nil:
		return fmt.Sprintf("%d round(s), too few to tell from noise", r.Rounds)
	case *w:
		return "within noise (lower in some rounds, higher in others)"
	case r.Min > 1:
		return fmt.Sprintf("not within noise: higher in each of %d rounds", r.Rounds)
	default:
		return fmt.Sprintf("not within noise: lower in each of %d rounds", r.Rounds)
	}
}

// ShadowComparison is a shadowed qn-webhook's slices against the same
// server without a shadow, measured in the same rounds.
type ShadowComparison struct {
	// With and Without name the two targets (NameWebhookShadow and
	// NameWebhook when empty).
	With, Without                             string
	Throughput, P50, P99, P999, CPUPerRequest RoundRatios
	// Shadow sums the shadowed server's counts over its slices.
	Shadow ShadowCounts
}

// CompareShadow compares the slices of a shadowed server (with) with those
// of the same server without a shadow, round by round.
func CompareShadow(with, without []Slice) ShadowComparison {
	pct := func(p float64) func(Slice) float64 {
		return func(s Slice) float64 { return float64(s.Result.Percentile(p)) }
	}
	c := ShadowComparison{
		Throughput:    newRoundRatios(roundRatios(with, without, func(s Slice) float64 { return s.Result.Throughput() })),
		P50:           newRoundRatios(roundRatios(with, without, pct(50))),
		P99:           newRoundRatios(roundRatios(with, without, pct(99))),
		P999:          newRoundRatios(roundRatios(with, without, pct(99.9))),
		CPUPerRequest: newRoundRatios(roundRatios(with, without, func(s Slice) float64 { return float64(s.CPUPerRequest()) })),
	}
	for _, s := range with {
		if s.Shadow != nil {
			c.Shadow = c.Shadow.Add(*s.Shadow)
		}
	}
	return c
}

// Markdown is the comparison as a paragraph of the generated section.
func (c ShadowComparison) Markdown() string {
	share := func(n, of int) string {
		if of == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(of))
	}
	sh := c.Shadow
	with, without := c.With, c.Without
	if with == "" {
		with, without = NameWebhookShadow, NameWebhook
	}
	return fmt.Sprintf("**With a shadow vs without** (%s ÷ %s, median of the per-round ratios, min–max over %d rounds): throughput %s, p50 %s, p99 %s, p99.9 %s, server CPU per request %s. "+
		"Served p99 with a shadow vs without: %s. "+
		"The shadow judged %d of the %d requests answered (%s) and dropped %d (%s: its queue was full); it disagreed with the served answer on %d (%s of those judged).\n",
		with, without, c.P99.Rounds, c.Throughput, c.P50, c.P99, c.P999, c.CPUPerRequest,
		c.P99.Verdict(),
		sh.Judged, sh.Answered, share(sh.Judged, sh.Answered), sh.Dropped, share(sh.Dropped, sh.Answered), sh.Disagreed, share(sh.Disagreed, sh.Judged))
}
