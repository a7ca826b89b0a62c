package load

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// Names of the servers the comparison runs.
const (
	NameWebhook      = "qn-webhook"
	NameWebhookExtra = "qn-webhook +1000 policies"
	NameOPA          = "OPA"
	// NameWebhookRedis is qn-webhook with its windows in a redis-server of
	// its own, whose CPU counts in qn-webhook's: the chart's store.
	NameWebhookRedis = "qn-webhook, Redis windows"
	NameCeiling      = "bare TLS ceiling"
	// NameWebhookShadow is qn-webhook with a candidate policy set in
	// --shadow-policy-dir (WriteShadowCandidate), judged off the response
	// path beside the served bundled set.
	NameWebhookShadow = "qn-webhook + shadow"
)

// Scenario names the goals are read from.
const (
	ScenarioClosedValidate = "closed-validate"
	ScenarioClosedMutate   = "closed-mutate"
	ScenarioOpenValidate   = "open-validate"
)

// Machine describes where a run happened and how busy it was.
type Machine struct {
	CPU         string
	Cores       int
	MemoryBytes uint64
	Kernel      string
	GoVersion   string
	OPAVersion  string
	// LoadBefore and LoadAfter are /proc/loadavg's 1, 5 and 15 minute
	// figures at the start and the end.
	LoadBefore, LoadAfter string
}

// DescribeMachine reads /proc for the CPU model, cores, memory and kernel.
func DescribeMachine(opaVersion string) Machine {
	m := Machine{Cores: numCPU(), GoVersion: runtime.Version(), OPAVersion: opaVersion, LoadBefore: LoadAverage()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	m.MemoryBytes = harness.MemoryTotal()
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	return m
}

// LoadAverage is the 1, 5 and 15 minute load average.
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Report is one comparison run, rendered into docs/benchmarks.md.
type Report struct {
	Machine   Machine
	Started   time.Time
	Finished  time.Time
	Slices    int
	SliceTime time.Duration
	Users     int
	Scenarios []ScenarioResult
	// InProcess are the go test benchmarks run by `make bench` before the
	// load comparison, if their output was given, and the notes written
	// with them (how busy the machine was).
	InProcess      []Benchmark
	InProcessNotes []string
	// RuntimeVariant is the Go runtime setting (e.g. ChartRuntime)
	// that qn-webhook, its Redis-windowed form and OPA were also run with,
	// or "".
	RuntimeVariant string
}

// WithRuntime names target run with the Go runtime setting env.
func WithRuntime(target, env string) string { return target + " " + env }

// ChartRuntime is the Go runtime setting qn-webhook runs with in the
// chart's 256 MiB container: the soft memory limit it sets itself
// (cmd/qn-webhook/app/memlimit.go) and the GOGC=400 that a limit selects.
// Both are given to every target run with it, OPA included, so that the
// targets compared run with the same collector settings.
const ChartRuntime = "GOGC=400 GOMEMLIMIT=192MiB"

// RuntimeEnv is the environment of a runtime setting: its space-separated
// NAME=value assignments (nil for "").
func RuntimeEnv(setting string) ([]string, error) {
	env := strings.Fields(setting)
	if len(env) == 0 {
		return nil, nil
	}
	for _, kv := range env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return nil, fmt.Errorf("%q in %q is not NAME=value", kv, setting)
		}
	}
	return env, nil
}

func (r *Report) scenario(name string) *ScenarioResult {
	for i := range r.Scenarios {
		if r.Scenarios[i].Scenario.Name == name {
			return &r.Scenarios[i]
		}
	}
	return nil
}

// Goal is one target of the issue, judged on this run.
type Goal struct {
	What     string
	Target   string
	Measured string
	// Met is nil when the run lacks what the goal needs.
	Met *bool
}

func verdict(ok bool) *bool { return &ok }

// Goals judges the run against the targets of the load issue.
func (r *Report) Goals() []Goal {
	var goals []Goal
	perReq := func(s Slice) float64 { return float64(s.CPUPerRequest()) }
	tput := func(s Slice) float64 { return s.Result.Throughput() }
	if cv := r.scenario(ScenarioClosedValidate); cv != nil {
		qn, opa, ceil, extra := cv.Slices[NameWebhook], cv.Slices[NameOPA], cv.Slices[NameCeiling], cv.Slices[NameWebhookExtra]
		if len(qn) > 0 {
			cpu := Summarize(qn).CPUPerRequest
			goals = append(goals, Goal{"server CPU per validate request", "≤ 110 µs", fmt.Sprintf("%.0f µs", micros(cpu)), verdict(cpu <= 110*time.Microsecond)})
		}
		if len(qn) > 0 && len(opa) > 0 {
			x := Ratio(opa, qn, perReq)
			goals = append(goals, Goal{"… better than OPA's (OPA ÷ qn-webhook, both with Go's default GC)", "≥ 2.7×", fmt.Sprintf("%.2f×", x), verdict(x >= 2.7)})
		}
		if len(qn) > 0 && len(ceil) > 0 {
			x := Ratio(qn, ceil, perReq)
			goals = append(goals, Goal{"… within 2× of the ceiling's (qn-webhook ÷ ceiling)", "≤ 2×", fmt.Sprintf("%.2f×", x), verdict(x <= 2)})
		}
		if len(qn) > 0 && len(opa) > 0 {
			x := Ratio(qn, opa, tput)
			goals = append(goals, Goal{"closed-loop throughput vs OPA (qn-webhook ÷ OPA)", "≥ 3×", fmt.Sprintf("%.2f×", x), verdict(x >= 3)})
		}
		if len(qn) > 0 && len(ceil) > 0 {
			x := Ratio(qn, ceil, tput)
			goals = append(goals, Goal{"closed-loop throughput vs the ceiling", "≥ 55 %", fmt.Sprintf("%.0f %%", 100*x), verdict(x >= 0.55)})
		}
		if len(qn) > 0 && len(extra) > 0 {
			x := Ratio(extra, qn, tput)
			goals = append(goals, Goal{"throughput with 1,000 policies of other roles vs without", "≥ 90 %", fmt.Sprintf("%.0f %%", 100*x), verdict(x >= 0.9)})
		}
	}
	if cv := r.scenario(ScenarioClosedValidate); cv != nil {
		goals = append(goals, r.likeForLikeGoals(cv, perReq)...)
	}
	if ov := r.scenario(ScenarioOpenValidate); ov != nil {
		if qn := ov.Slices[NameWebhook]; len(qn) > 0 {
			s := Summarize(qn)
			rate := ov.Scenario.Load.Rate
			goals = append(goals,
				Goal{fmt.Sprintf("open loop %.0f req/s: p99", rate), "≤ 3 ms", fmtDur(s.P99), verdict(s.P99 <= 3*time.Millisecond)},
				Goal{fmt.Sprintf("open loop %.0f req/s: p99.9", rate), "≤ 10 ms", fmtDur(s.P999), verdict(s.P999 <= 10*time.Millisecond)},
				Goal{fmt.Sprintf("open loop %.0f req/s: errors", rate), "0", fmt.Sprintf("%d of %d", s.Errors, s.Requests), verdict(s.Errors == 0)})
		}
		for _, c := range r.shadowComparisons(ov) {
			goals = append(goals, Goal{fmt.Sprintf("open loop %.0f req/s: served p99 with a shadow ÷ without, per round, %s", ov.Scenario.Load.Rate, c.settings), "within noise",
				c.P99.String() + ", " + c.P99.Verdict(), c.P99.WithinNoise()})
		}
		shipped := NameWebhookRedis
		if r.RuntimeVariant != "" {
			shipped = WithRuntime(NameWebhookRedis, r.RuntimeVariant)
		}
		if qn, opa := ov.Slices[shipped], ov.Slices[NameOPA]; len(qn) > 0 && len(opa) > 0 {
			q, o := Summarize(qn), Summarize(opa)
			goals = append(goals, Goal{fmt.Sprintf("open loop %.0f req/s, %s: p99 no worse than OPA's", ov.Scenario.Load.Rate, shipped), "≤ " + fmtDur(o.P99), fmtDur(q.P99), verdict(q.P99 <= o.P99)})
		}
	}
	for _, g := range []struct {
		name  string
		limit uint64
		label string
	}{{NameWebhook, 64 << 20, "RSS under load, bundled policies"}, {NameWebhookExtra, 128 << 20, "RSS under load, 1,000 extra policies"}} {
		var peak uint64
		seen := false
		for _, sc := range r.Scenarios {
			for _, sl := range sc.Slices[g.name] {
				peak, seen = max(peak, sl.Server.MaxRSS), true
			}
		}
		if seen {
			goals = append(goals, Goal{g.label, fmt.Sprintf("≤ %d MiB", g.limit>>20), fmt.Sprintf("%.1f MiB", mib(peak)), verdict(peak <= g.limit)})
		}
	}
	return goals
}

// likeForLikeGoals compare qn-webhook with OPA only at the same Go runtime
// settings, and the Redis-windowed qn-webhook (redis-server's CPU counted)
// with the in-process store at the same settings.
func (r *Report) likeForLikeGoals(cv *ScenarioResult, perReq func(Slice) float64) []Goal {
	var goals []Goal
	settings := []string{""}
	if r.RuntimeVariant != "" {
		settings = append(settings, r.RuntimeVariant)
	}
	for _, env := range settings {
		name := func(target string) string {
			if env == "" {
				return target
			}
			return WithRuntime(target, env)
		}
		gc := "Go's default GC"
		if env != "" {
			gc = env
		}
		qn, redis, opa := cv.Slices[name(NameWebhook)], cv.Slices[name(NameWebhookRedis)], cv.Slices[name(NameOPA)]
		if len(redis) > 0 && len(opa) > 0 {
			x := Ratio(redis, opa, perReq)
			goals = append(goals, Goal{fmt.Sprintf("CPU per validate request, Redis windows with redis-server's CPU ÷ OPA's, both with %s", gc), "≤ 0.5×", fmt.Sprintf("%.2f×", x), verdict(x <= 0.5)})
		}
		if len(redis) > 0 && len(qn) > 0 {
			x := Ratio(redis, qn, perReq)
			goals = append(goals, Goal{fmt.Sprintf("Redis windows over the in-process store, total CPU, both with %s", gc), "≤ +15 %", fmt.Sprintf("%+.0f %%", 100*(x-1)), verdict(x <= 1.15)})
		}
		if env != "" && len(qn) > 0 && len(opa) > 0 {
			x := Ratio(opa, qn, perReq)
			goals = append(goals, Goal{fmt.Sprintf("… OPA ÷ qn-webhook, both with %s", gc), "≥ 2.7×", fmt.Sprintf("%.2f×", x), verdict(x >= 2.7)})
		}
	}
	return goals
}

// Markers around the generated section of docs/benchmarks.md.
const (
	BeginMarker = "<!-- BEGIN load comparison: generated by `make bench` (test/load/cmd/qnload); edits inside are overwritten -->"
	EndMarker   = "<!-- END load comparison -->"
)

// Markdown renders the generated section, markers included.
func (r *Report) Markdown() string {
	var b strings.Builder
	m := r.Machine
	b.WriteString(BeginMarker + "\n")
	b.WriteString("### Figures of the last `make bench`\n\n")
	fmt.Fprintf(&b, "Run %s (%s) on %d × `%s`, %.0f GiB, Linux %s, %s, OPA %s (the `opa` command built from the module go.mod pins). Client and servers share the machine.\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second), m.Cores, m.CPU, float64(m.MemoryBytes)/(1<<30), m.Kernel, m.GoVersion, m.OPAVersion)
	fmt.Fprintf(&b, "**How busy the machine was:** load average %s before and %s after (1/5/15 min); other processes (neither the servers nor the load generator) used a median %.0f %% of the machine's CPU during slices (largest slice: %.0f %%), %.0f %% of it at a positive nice value (background builds, which yield to the run). ",
		m.LoadBefore, m.LoadAfter, 100*r.otherShare(false), 100*r.otherShare(true), 100*r.niceShareOfOther())
	b.WriteString("Figures taken on a shared machine move with its load; ratios between targets, measured in the same rounds, move much less.\n\n")
	fmt.Fprintf(&b, "**Method:** every target gets %d slices of %s per scenario after a warm-up slice, alternating A, B, C, A, B, C …; tables show medians over slices; ratios are medians of per-round ratios. "+
		"Each request carries a fresh `request.uid` and one of %d users in turn (rate windows are per user, so no run measures 429s). Every answer is checked: HTTP 200, an admission.k8s.io/v1 AdmissionReview echoing the uid, a patch only with `patchType: JSONPatch` and only on /mutate, and for qn-webhook and OPA the fixture's expected decision and a patch that sets the managed-by label. "+
		"Server CPU per request is utime+stime from /proc/<pid>/stat over the slice ÷ answers; RSS is the largest VmRSS sampled every 50 ms. "+
		"The request mix sends each fixture of `test/load/testdata` in turn (%s).\n\n",
		r.Slices, r.SliceTime, r.Users, r.fixtureList())
	b.WriteString("Targets: **qn-webhook** (`cmd/qn-webhook`, bundled policies, decision log to stdout as the chart sets it, grouped into one write per 5 ms, read by the load generator as a container runtime reads it); " +
		"**qn-webhook +1000 policies** (the same with `--policy-dir` holding the bundled set plus 1,000 roles, each with its own policy package); " +
		"**OPA** (`opa run --server` over TLS, `test/load/opa`: the same QuantumNode rules written as OPA's Kubernetes admission tutorial does, default decision `system/main`, mutation through `/v0/data/system/mutate`, no decision logs, no rate windows); " +
		"**bare TLS ceiling** (`test/load/cmd/ceiling`: TLS, read, decode the review with encoding/json, answer allowed)")
	if r.hasTarget(NameWebhookShadow) {
		b.WriteString("; **" + NameWebhookShadow + "** (compared with qn-webhook in the same rounds, and with the runtime setting below, as the chart runs it, with qn-webhook at that setting: qn-webhook as the first, plus `--shadow-policy-dir` holding a candidate set at the default `--shadow-cpu` and `--shadow-queue`: the bundled set with port 22 refused in the default role and the realtime latency budget raised from 50 to 100 ms, so the shadow disagrees on part of the mix; every answer is checked to name the served set's revision; a slice ends when the shadow has judged or dropped each of its requests, and the shadow's counts come from `/metrics` after each slice)")
	}
	b.WriteString("; **" + NameWebhookRedis + "** (qn-webhook with `--window-store redis` on a redis-server of its own, persistence off, as the chart's bundled one: every request takes a slot in Redis, and redis-server's CPU time is counted in the target's CPU per request)")
	if v := r.RuntimeVariant; v != "" {
		fmt.Fprintf(&b, "; targets named with **%s** run with those Go runtime variables, every one set for qn-webhook and OPA alike (the chart's 256 MiB container gives qn-webhook `GOMEMLIMIT=192MiB`, which it sets itself, and with a limit it selects `GOGC=400`; both are set explicitly here, so OPA runs with the same collector settings, not with its default GOGC under the limit). qn-webhook and OPA are compared only at equal settings: a ratio between different GC settings is not reported", v)
	}
	b.WriteString(".\n\n")

	b.WriteString("#### Targets of the issue, this run\n\n| goal | target | measured | |\n|---|---|---|---|\n")
	for _, g := range r.Goals() {
		mark := "n/a"
		if g.Met != nil {
			mark = "met"
			if !*g.Met {
				mark = "**missed**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.What, g.Target, g.Measured, mark)
	}
	b.WriteString("\n")

	for i := range r.Scenarios {
		sc := &r.Scenarios[i]
		fmt.Fprintf(&b, "#### %s\n\n", sc.Scenario.Title)
		b.WriteString("| target | req/s (min–max) | p50 | p90 | p99 | p99.9 | max | server CPU/req (min–max) | peak RSS | errors | client CPU/req |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, name := range sc.Scenario.Targets {
			s := Summarize(sc.Slices[name])
			fmt.Fprintf(&b, "| %s | %.0f (%.0f–%.0f) | %s | %s | %s | %s | %s | %.0f µs (%.0f–%.0f) | %.1f MiB | %d / %d | %.0f µs |\n",
				name, s.Throughput, s.ThroughputSpread[0], s.ThroughputSpread[1], fmtDur(s.P50), fmtDur(s.P90), fmtDur(s.P99), fmtDur(s.P999), fmtDur(s.Max),
				micros(s.CPUPerRequest), micros(s.CPUPerRequestSpan[0]), micros(s.CPUPerRequestSpan[1]), mib(s.MaxRSS), s.Errors, s.Requests, micros(s.ClientCPUPerReq))
		}
		for _, c := range r.shadowComparisons(sc) {
			b.WriteString("\n" + c.Markdown())
		}
		if sc.Scenario.Load.Rate > 0 {
			var lag time.Duration
			for _, name := range sc.Scenario.Targets {
				lag = max(lag, Summarize(sc.Slices[name]).MaxLag)
			}
			fmt.Fprintf(&b, "\nLatency counts from each request's intended send time (1/%.0f s apart), so a stall shows in every request queued behind it; the generator started a request at most %s after it was due.\n", sc.Scenario.Load.Rate, fmtDur(lag))
		}
		b.WriteString("\n")
	}

	if len(r.InProcess) > 0 {
		b.WriteString("#### In process, this run (`go test -bench`, median of the counts)\n\n")
		if len(r.InProcessNotes) > 0 {
			fmt.Fprintf(&b, "Run just before the load comparison; %s.\n\n", strings.Join(r.InProcessNotes, "; "))
		}
		b.WriteString("| package | benchmark | time/op | B/op | allocs/op |\n|---|---|---|---|---|\n")
		for _, bm := range r.InProcess {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", bm.Package, bm.Name, fmtNs(bm.NsPerOp), fmtCount(bm.BytesPerOp), fmtCount(bm.AllocsPerOp))
		}
		b.WriteString("\n")
	}
	b.WriteString(EndMarker + "\n")
	return b.String()
}

// settingsComparison is a shadow comparison and the runtime setting both
// of its targets ran with.
type settingsComparison struct {
	ShadowComparison
	settings string
}

// shadowComparisons compares each shadowed target of sc with qn-webhook
// at the same runtime setting: Go's defaults, and the runtime variant
// (the chart's setting) when the run has one.
func (r *Report) shadowComparisons(sc *ScenarioResult) []settingsComparison {
	pairs := []struct{ with, without, settings string }{{NameWebhookShadow, NameWebhook, "both with Go's default GC"}}
	if v := r.RuntimeVariant; v != "" {
		pairs = append(pairs, struct{ with, without, settings string }{WithRuntime(NameWebhookShadow, v), WithRuntime(NameWebhook, v), "both with " + v})
	}
	var out []settingsComparison
	for _, p := range pairs {
		if with, without := sc.Slices[p.with], sc.Slices[p.without]; len(with) > 0 && len(without) > 0 {
			c := CompareShadow(with, without)
			c.With, c.Without = p.with, p.without
			out = append(out, settingsComparison{c, p.settings})
		}
	}
	return out
}

func (r *Report) hasTarget(name string) bool {
	for _, sc := range r.Scenarios {
		if len(sc.Slices[name]) > 0 {
			return true
		}
	}
	return false
}

func (r *Report) otherShare(largest bool) float64 {
	var xs []float64
	for _, sc := range r.Scenarios {
		for _, ss := range sc.Slices {
			for _, sl := range ss {
				if sl.WallCPU > 0 {
					xs = append(xs, float64(sl.OtherCPU)/float64(sl.WallCPU))
				}
			}
		}
	}
	if largest {
		return extreme(xs, true)
	}
	return median(xs)
}

func (r *Report) niceShareOfOther() float64 {
	var other, nice time.Duration
	for _, sc := range r.Scenarios {
		for _, ss := range sc.Slices {
			for _, sl := range ss {
				other += sl.OtherCPU
				nice += sl.OtherNiceCPU
			}
		}
	}
	if other == 0 {
		return 0
	}
	return float64(nice) / float64(other)
}

func (r *Report) fixtureList() string {
	var names []string
	seen := map[string]bool{}
	for _, sc := range r.Scenarios {
		for _, c := range sc.Scenario.Load.Calls {
			if !seen[c.Fixture.Name] {
				seen[c.Fixture.Name] = true
				names = append(names, fmt.Sprintf("`%s` %.1f KB", strings.TrimSuffix(c.Fixture.Name, ".json"), float64(c.Fixture.Size)/1000))
			}
		}
	}
	return strings.Join(names, ", ")
}

// RewriteSection replaces the generated section of doc (between the
// markers, inclusive) with section, or appends it when doc has none. Text
// outside the markers is kept as it is.
func RewriteSection(doc, section string) (string, error) {
	begin := strings.Index(doc, BeginMarker)
	end := strings.Index(doc, EndMarker)
	switch {
	case begin < 0 && end < 0:
		return strings.TrimRight(doc, "\n") + "\n\n" + section, nil
	case begin < 0 || end < 0 || end < begin:
		return "", fmt.Errorf("the generated section's markers are broken: want %q before %q", BeginMarker, EndMarker)
	}
	after := doc[end+len(EndMarker):]
	after = strings.TrimPrefix(after, "\n")
	return doc[:begin] + section + after, nil
}

// Benchmark is one benchmark's medians over its -count runs.
type Benchmark struct {
	Package     string
	Name        string
	NsPerOp     float64
	BytesPerOp  float64 // -1 when not reported
	AllocsPerOp float64 // -1 when not reported
}

// benchLine is a benchmark's result; B/op and allocs/op are read from the
// rest of the line, where MB/s and a benchmark's own metrics (b.ReportMetric:
// "12.8 %judged") may come before them.
var (
	benchLine   = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(.*)$`)
	benchBytes  = regexp.MustCompile(`(?:^|\s)([\d.]+) B/op(?:\s|$)`)
	benchAllocs = regexp.MustCompile(`(?:^|\s)([\d.]+) allocs/op(?:\s|$)`)
)

// ParseBenchmarks reads `go test -bench` output and returns the median of
// each benchmark's runs, in the order first seen, and the notes: lines
// that start with "# " (make bench writes the load average there).
func ParseBenchmarks(r io.Reader) ([]Benchmark, []string, error) {
	type acc struct {
		pkg, name         string
		ns, bytes, allocs []float64
	}
	var order []string
	all := map[string]*acc{}
	pkg := ""
	var notes []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if note, ok := strings.CutPrefix(line, "# "); ok {
			notes = append(notes, strings.TrimSpace(note))
			continue
		}
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), "github.com/quantumnode/qn-admission/")
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key := pkg + " " + m[1]
		a := all[key]
		if a == nil {
			a = &acc{pkg: pkg, name: m[1]}
			all[key] = a
			order = append(order, key)
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		a.ns = append(a.ns, ns)
		if b := benchBytes.FindStringSubmatch(m[3]); b != nil {
			v, _ := strconv.ParseFloat(b[1], 64)
			a.bytes = append(a.bytes, v)
		}
		if n := benchAllocs.FindStringSubmatch(m[3]); n != nil {
			v, _ := strconv.ParseFloat(n[1], 64)
			a.allocs = append(a.allocs, v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	out := make([]Benchmark, 0, len(order))
	for _, k := range order {
		a := all[k]
		bm := Benchmark{Package: a.pkg, Name: a.name, NsPerOp: median(a.ns), BytesPerOp: -1, AllocsPerOp: -1}
		if len(a.bytes) > 0 {
			bm.BytesPerOp = median(a.bytes)
		}
		if len(a.allocs) > 0 {
			bm.AllocsPerOp = median(a.allocs)
		}
		out = append(out, bm)
	}
	return out, notes, nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", micros(d))
	}
}

func fmtNs(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	default:
		return fmt.Sprintf("%.0f ns", ns)
	}
}

func fmtCount(v float64) string {
	if v < 0 {
		return "—"
	}
	s := strconv.FormatFloat(v, 'f', 0, 64)
	// thousands separators, as the rest of docs/benchmarks.md writes them
	var b bytes.Buffer
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
