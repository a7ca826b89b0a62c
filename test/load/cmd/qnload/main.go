// Command qnload runs the load comparison: qn-webhook (with the bundled
// policies, with 1,000 extra policies, and with a shadow policy set), the
// OPA server with the same rules, and the bare-TLS ceiling, in alternating
// slices on this machine.
// It prints the generated Markdown section and, with --doc, rewrites that
// section of docs/benchmarks.md. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/load"
)

type options struct {
	slices          int
	slice, warmup   time.Duration
	concurrency     int
	rate            float64
	extraRates      string
	openInFlight    int
	users           int
	extraPolicies   int
	scenarios       string
	doc             string
	inProcess       string
	cpuProfile      string
	gogcVariant     string
	variantEnv      []string // gogcVariant's variables, parsed once
	redis           bool
	shadow          bool
	profileDuration time.Duration
	profileTarget   string
	profileOnly     bool
	profileRate     float64
}

func main() {
	var o options
	flag.IntVar(&o.slices, "slices", 5, "Measured slices per target per scenario.")
	flag.DurationVar(&o.slice, "slice", 4*time.Second, "Length of one slice.")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "Unmeasured warm-up per target per scenario.")
	flag.IntVar(&o.concurrency, "concurrency", 8, "Requests in flight in the closed loops.")
	flag.Float64Var(&o.rate, "rate", 2000, "Arrivals per second in the open loop.")
	flag.StringVar(&o.extraRates, "extra-rates", "1000", "More open-loop rates to measure after the main one (comma-separated; empty: none), to find where latency holds.")
	flag.IntVar(&o.openInFlight, "open-max-in-flight", 64, "Most requests in flight in the open loop.")
	flag.IntVar(&o.users, "users", load.DefaultUsers, "Size of the user pool requests rotate through.")
	flag.IntVar(&o.extraPolicies, "extra-policies", 1000, "Roles with their own policy for the second qn-webhook (0: leave it out).")
	flag.StringVar(&o.scenarios, "scenarios", "closed-validate,closed-mutate,open-validate", "Scenarios to run, in order.")
	flag.StringVar(&o.doc, "doc", "", "Rewrite the generated load section of this Markdown file (e.g. docs/benchmarks.md).")
	flag.StringVar(&o.inProcess, "inprocess", "", "`go test -bench` output to include as the in-process table.")
	flag.StringVar(&o.gogcVariant, "runtime-variant", load.ChartRuntime, "Also measure qn-webhook, its Redis-windowed form and OPA with these Go runtime variables (space-separated NAME=value), every one set for both (default: what qn-webhook runs with in the chart's 256 MiB container, the soft limit it sets itself and the GOGC=400 that limit selects; empty: none).")
	flag.BoolVar(&o.redis, "redis", true, "Also measure qn-webhook with its windows in a redis-server of its own (needs redis-server on PATH), redis-server's CPU counted in its figures.")
	flag.BoolVar(&o.shadow, "shadow", true, "Also measure qn-webhook with a candidate policy set in --shadow-policy-dir (at the default --shadow-cpu), in the same rounds as qn-webhook without one: served latency and CPU with and without a shadow, and what share of the requests the shadow judged and dropped.")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "After the comparison, write a CPU profile of qn-webhook under the closed validate loop here.")
	flag.DurationVar(&o.profileDuration, "profile-duration", 10*time.Second, "Length of the --cpuprofile capture.")
	flag.StringVar(&o.profileTarget, "profile-target", "shipped", "What --cpuprofile profiles: shipped (Redis windows on a redis-server of its own, with the --runtime-variant setting, as the chart runs it) memory (in-process windows, the same runtime setting) or shadow (memory, with the load suite's candidate set in --shadow-policy-dir).")
	flag.BoolVar(&o.profileOnly, "profile-only", false, "With --cpuprofile: skip the comparison, only profile.")
	flag.Float64Var(&o.profileRate, "profile-rate", 0, "With --cpuprofile: profile under an open loop of this many requests per second (at most --open-max-in-flight in flight) instead of the closed validate loop (0).")
	flag.Parse()
	var err error
	if o.variantEnv, err = load.RuntimeEnv(o.gogcVariant); err != nil {
		fmt.Fprintf(os.Stderr, "qnload: --runtime-variant: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "qnload: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	root := harness.ModuleRoot()
	fixtures, err := load.LoadFixtures(load.DefaultFixtureDir(root))
	if err != nil {
		return err
	}
	var inProcess []load.Benchmark
	var inProcessNotes []string
	if o.inProcess != "" {
		f, err := os.Open(o.inProcess)
		if err != nil {
			return err
		}
		inProcess, inProcessNotes, err = load.ParseBenchmarks(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	work, err := os.MkdirTemp("", "qnload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if o.cpuProfile != "" && o.profileOnly {
		return profile(ctx, o, work, fixtures)
	}

	logf("building qn-webhook, the ceiling and opa")
	webhookBin, err := harness.Build(ctx, work, "./cmd/qn-webhook")
	if err != nil {
		return err
	}
	ceilingBin, err := harness.Build(ctx, work, "./test/load/cmd/ceiling")
	if err != nil {
		return err
	}
	opaBin, opaVersion, err := load.EnsureOPA(ctx)
	if err != nil {
		return err
	}
	machine := load.DescribeMachine(opaVersion)

	servers := map[string]*load.Server{}
	defer func() {
		for name, s := range servers {
			if err := s.Stop(); err != nil {
				logf("stop %s: %v", name, err)
			}
		}
	}()
	start := func(name string, f func() (*load.Server, error)) error {
		s, err := f()
		if err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		servers[name] = s
		logf("%s: pid %d at %s", name, s.PID, s.BaseURL)
		return nil
	}
	if err := start(load.NameWebhook, func() (*load.Server, error) {
		return load.StartWebhook(load.NameWebhook, webhookBin, filepath.Join(work, "qn-certs"))
	}); err != nil {
		return err
	}
	if o.extraPolicies > 0 {
		dir := filepath.Join(work, "policies-extra")
		if err := load.WriteExtraPolicies(dir, o.extraPolicies); err != nil {
			return err
		}
		if err := start(load.NameWebhookExtra, func() (*load.Server, error) {
			// A long poll interval: the measurement is of decisions, not of
			// re-hashing 1,000 files every 10 seconds.
			return load.StartWebhook(load.NameWebhookExtra, webhookBin, filepath.Join(work, "qn-extra-certs"),
				"--policy-dir", dir, "--policy-poll-interval", "1h")
		}); err != nil {
			return err
		}
	}
	if o.shadow {
		candidate := filepath.Join(work, "policies-candidate")
		if err := load.WriteShadowCandidate(candidate); err != nil {
			return err
		}
		if err := start(load.NameWebhookShadow, func() (*load.Server, error) {
			return load.StartWebhookShadow(load.NameWebhookShadow, webhookBin, filepath.Join(work, "qn-shadow-certs"), candidate, nil)
		}); err != nil {
			return err
		}
		// And as the chart runs it, compared with qn-webhook at the same
		// setting: the candidate's heap costs a small heap at Go's default
		// GC more than it costs the chart's.
		if v := o.gogcVariant; v != "" {
			if err := start(load.WithRuntime(load.NameWebhookShadow, v), func() (*load.Server, error) {
				return load.StartWebhookShadow(load.WithRuntime(load.NameWebhookShadow, v), webhookBin, filepath.Join(work, "qn-shadow-variant-certs"), candidate, o.variantEnv)
			}); err != nil {
				return err
			}
		}
	}
	// Each of qn-webhook, its Redis-windowed form and OPA runs with Go's
	// defaults and, when given, with the runtime variant: they are
	// compared at equal settings only.
	envs := [][]string{nil}
	if o.variantEnv != nil {
		envs = append(envs, o.variantEnv)
	}
	for i, env := range envs {
		named := func(target string) string {
			if env == nil {
				return target
			}
			return load.WithRuntime(target, o.gogcVariant)
		}
		dir := func(what string) string { return filepath.Join(work, fmt.Sprintf("%s-%d-certs", what, i)) }
		if env != nil {
			if err := start(named(load.NameWebhook), func() (*load.Server, error) {
				return load.StartWebhookWithEnv(named(load.NameWebhook), webhookBin, dir("qn"), env)
			}); err != nil {
				return err
			}
		}
		if o.redis {
			if err := start(named(load.NameWebhookRedis), func() (*load.Server, error) {
				return load.StartWebhookWithRedis(named(load.NameWebhookRedis), webhookBin, dir("qn-redis"), env)
			}); err != nil {
				return err
			}
		}
		if err := start(named(load.NameOPA), func() (*load.Server, error) {
			return load.StartOPAWithEnv(named(load.NameOPA), opaBin, dir("opa"), env)
		}); err != nil {
			return err
		}
	}
	if err := start(load.NameCeiling, func() (*load.Server, error) {
		return load.StartCeiling(ceilingBin, filepath.Join(work, "ceiling-certs"))
	}); err != nil {
		return err
	}

	scenarios, err := pickScenarios(o, servers)
	if err != nil {
		return err
	}
	suite := &load.Suite{Servers: servers, Fixtures: fixtures, Slices: o.slices, Warmup: o.warmup, Log: os.Stderr}
	report := &load.Report{RuntimeVariant: o.gogcVariant, Machine: machine, Started: time.Now(), Slices: o.slices, SliceTime: o.slice, Users: o.users, InProcess: inProcess, InProcessNotes: inProcessNotes}
	logf("load average before: %s", machine.LoadBefore)
	results, err := suite.Run(ctx, scenarios)
	if err != nil {
		return err
	}
	report.Scenarios = results
	report.Finished = time.Now()
	report.Machine.LoadAfter = load.LoadAverage()
	for name, s := range servers {
		if err := s.Stop(); err != nil {
			logf("stop %s: %v\n%s", name, err, s.Logs())
		}
		delete(servers, name)
	}

	section := report.Markdown()
	fmt.Print(section)
	if o.doc != "" {
		old, err := os.ReadFile(o.doc)
		if err != nil {
			return err
		}
		doc, err := load.RewriteSection(string(old), section)
		if err != nil {
			return fmt.Errorf("%s: %w", o.doc, err)
		}
		if err := os.WriteFile(o.doc, []byte(doc), 0o644); err != nil {
			return err
		}
		logf("rewrote the load section of %s", o.doc)
	}
	if o.cpuProfile != "" {
		return profile(ctx, o, work, fixtures)
	}
	return nil
}

func pickScenarios(o options, servers map[string]*load.Server) ([]load.Scenario, error) {
	// Only the servers that run, in the order the tables show them: each
	// setting's qn-webhook forms beside its OPA.
	running := func(names ...string) []string {
		var out []string
		for _, n := range names {
			if _, ok := servers[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	variant := func(target string) string { return load.WithRuntime(target, o.gogcVariant) }
	validateTargets := running(load.NameWebhook, load.NameWebhookShadow, load.NameWebhookExtra, load.NameWebhookRedis, load.NameOPA,
		variant(load.NameWebhook), variant(load.NameWebhookShadow), variant(load.NameWebhookRedis), variant(load.NameOPA), load.NameCeiling)
	mutateTargets := running(load.NameWebhook, load.NameWebhookShadow, variant(load.NameWebhook), variant(load.NameWebhookShadow), load.NameOPA, load.NameCeiling)
	// The open loop adds the configuration the chart ships: Redis windows
	// under the chart's runtime setting.
	shipped := load.NameWebhookRedis
	if o.gogcVariant != "" {
		shipped = variant(load.NameWebhookRedis)
	}
	// A shadowed qn-webhook is measured at each setting beside qn-webhook
	// at the same one.
	openTargets := running(load.NameWebhook, load.NameWebhookShadow, variant(load.NameWebhook), variant(load.NameWebhookShadow), shipped, load.NameOPA, load.NameCeiling)
	all := map[string]load.Scenario{
		load.ScenarioClosedValidate: {
			Name: load.ScenarioClosedValidate, Title: fmt.Sprintf("Closed loop, /validate, %d in flight", o.concurrency),
			Load: load.Load{Concurrency: o.concurrency, Duration: o.slice}, Targets: validateTargets,
		},
		load.ScenarioClosedMutate: {
			Name: load.ScenarioClosedMutate, Title: fmt.Sprintf("Closed loop, /mutate, %d in flight", o.concurrency), Mutating: true,
			Load: load.Load{Concurrency: o.concurrency, Duration: o.slice}, Targets: mutateTargets,
		},
		load.ScenarioOpenValidate: {
			Name: load.ScenarioOpenValidate, Title: fmt.Sprintf("Open loop, /validate, %.0f requests per second", o.rate),
			Load: load.Load{Concurrency: o.openInFlight, Rate: o.rate, Duration: o.slice}, Targets: openTargets,
		},
	}
	var out []load.Scenario
	for name := range strings.SplitSeq(o.scenarios, ",") {
		sc, ok := all[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q (known: closed-validate, closed-mutate, open-validate)", name)
		}
		out = append(out, sc)
		if sc.Name != load.ScenarioOpenValidate || o.extraRates == "" {
			continue
		}
		for r := range strings.SplitSeq(o.extraRates, ",") {
			rate, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
			if err != nil || rate <= 0 {
				return nil, fmt.Errorf("--extra-rates: %q is not a positive rate", r)
			}
			extra := sc
			extra.Name = fmt.Sprintf("%s@%.0f", sc.Name, rate)
			extra.Title = fmt.Sprintf("Open loop, /validate, %.0f requests per second", rate)
			extra.Load.Rate = rate
			out = append(out, extra)
		}
	}
	return out, nil
}

// profile runs qn-webhook with a pprof listener under the closed validate
// loop, or the open one at --profile-rate, and saves a CPU profile of it.
func profile(ctx context.Context, o options, work string, fixtures []*load.Fixture) error {
	bin, err := harness.Build(ctx, work, "./test/load/cmd/qnprof")
	if err != nil {
		return err
	}
	env := o.variantEnv
	var srv *load.Server
	switch o.profileTarget {
	case "memory":
		srv, err = load.StartWebhookWithEnv(load.NameWebhook, bin, filepath.Join(work, "qnprof-certs"), env)
	case "shipped":
		srv, err = load.StartWebhookWithRedis(load.NameWebhookRedis, bin, filepath.Join(work, "qnprof-certs"), env)
	case "shadow":
		candidate := filepath.Join(work, "qnprof-shadow-policies")
		if err := load.WriteShadowCandidate(candidate); err != nil {
			return err
		}
		srv, err = load.StartWebhookShadow(load.NameWebhookShadow, bin, filepath.Join(work, "qnprof-certs"), candidate, env)
	default:
		return fmt.Errorf("--profile-target: %q is none of shipped, memory and shadow", o.profileTarget)
	}
	if err != nil {
		return err
	}
	defer srv.Stop()
	pprofAddr := srv.LogField("serving pprof", "pprofAddress")
	if pprofAddr == "" {
		return fmt.Errorf("qnprof did not say where pprof listens:\n%s", srv.Logs())
	}
	ld := load.Load{Calls: load.Mix(fixtures, false), Concurrency: o.concurrency, Duration: o.profileDuration + 2*time.Second}
	loop := "the closed validate loop"
	if o.profileRate > 0 {
		ld.Concurrency, ld.Rate = o.openInFlight, o.profileRate
		loop = fmt.Sprintf("an open validate loop of %.0f req/s", o.profileRate)
	}
	client := load.NewClient(srv.Target, ld.Concurrency)
	defer client.Close()
	done := make(chan error, 1)
	sampler, err := load.StartSampler(srv.PID, 50*time.Millisecond, srv.HelperPIDs...)
	if err != nil {
		return err
	}
	gcBefore := memStats(pprofAddr)
	go func() {
		r, err := client.Run(ctx, ld)
		if err == nil && r.Errors > 0 {
			err = fmt.Errorf("%d wrong answers while profiling, e.g. %v", r.Errors, r.FirstErrors)
		}
		if usage, serr := sampler.Stop(); err == nil && serr == nil && r.Requests > 0 {
			// The profile covers part of the run; these figures the whole
			// of it, so a profile's share of a function converts to µs per
			// request.
			n := time.Duration(r.Requests)
			logf("profiled run: %d requests, %.0f req/s, p50 %s, p99 %s, server CPU %s per request (of which helpers such as redis-server %s), load average %s",
				r.Requests, r.Throughput(), r.Percentile(50), r.Percentile(99), usage.CPU/n, usage.HelperCPU/n, load.LoadAverage())
			// How often the collector ran, and the allocation profile of
			// the run beside the CPU profile: at Go's default GC the
			// collector is a fifth of a request's CPU.
			if after := memStats(pprofAddr); after["NumGC"] >= gcBefore["NumGC"] {
				logf("GC: %.2f cycles per 1,000 requests, heap goal %d MiB, heap in use %d MiB",
					float64(after["NumGC"]-gcBefore["NumGC"])*1000/float64(r.Requests), after["NextGC"]>>20, after["HeapAlloc"]>>20)
			}
			if herr := saveProfile(fmt.Sprintf("http://%s/debug/pprof/heap", pprofAddr), o.cpuProfile+".heap"); herr != nil {
				logf("heap profile: %v", herr)
			} else {
				logf("allocation profile of the whole process: %s.heap (go tool pprof -sample_index=alloc_space -top %s.heap)", o.cpuProfile, o.cpuProfile)
			}
		}
		done <- err
	}()
	time.Sleep(time.Second)
	if err := saveProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, int(o.profileDuration.Seconds())), o.cpuProfile); err != nil {
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	logf("CPU profile of qn-webhook (%s) under %s: %s (go tool pprof -top %s)", o.profileTarget, loop, o.cpuProfile, o.cpuProfile)
	return nil
}

// memStats reads the profiled server's runtime.MemStats from its heap
// profile's text form ("# NumGC = 12" lines); empty when it cannot.
func memStats(pprofAddr string) map[string]uint64 {
	out := map[string]uint64{}
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/heap?debug=1", pprofAddr))
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		var name string
		var v uint64
		if n, _ := fmt.Sscanf(line, "# %s = %d", &name, &v); n == 2 {
			out[name] = v
		}
	}
	return out
}

// saveProfile writes the profile served at url to path.
func saveProfile(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "qnload: "+format+"\n", args...)
}
