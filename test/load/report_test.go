package load

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRewriteSectionReplacesOnlyTheGeneratedPart(t *testing.T) {
	section := BeginMarker + "\nnew figures\n" + EndMarker + "\n"
	cases := map[string]struct {
		doc, want, err string
	}{
		"a doc without the section gets it appended": {
			doc:  "# Benchmarks\n\nhand-written\n",
			want: "# Benchmarks\n\nhand-written\n\n" + section,
		},
		"the section is replaced and the text around it kept": {
			doc:  "# Benchmarks\n\nbefore\n\n" + BeginMarker + "\nold figures\n" + EndMarker + "\n\nafter\n",
			want: "# Benchmarks\n\nbefore\n\n" + section + "\nafter\n",
		},
		"an end marker without a begin marker is refused": {
			doc: "x\n" + EndMarker + "\n",
			err: "markers are broken",
		},
		"markers in the wrong order are refused": {
			doc: EndMarker + "\n" + BeginMarker + "\n",
			err: "markers are broken",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := RewriteSection(tc.doc, section)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
			again, err := RewriteSection(got, section)
			if err != nil || again != got {
				t.Fatalf("rewriting twice changed the doc:\n%s", again)
			}
		})
	}
}

func TestParseBenchmarksTakesTheMedianOfEachBenchmark(t *testing.T) {
	out := `# load average before ./webhook/: 4.90 4.70 3.70
goos: linux
pkg: github.com/quantumnode/qn-admission/webhook
BenchmarkValidateRealtime-2   	   10000	    205000 ns/op	   56000 B/op	    1075 allocs/op
BenchmarkValidateRealtime-2   	   10000	    199000 ns/op	   56100 B/op	    1074 allocs/op
BenchmarkValidateRealtime-2   	   10000	    300000 ns/op	   56200 B/op	    1076 allocs/op
PASS
pkg: github.com/quantumnode/qn-admission/policies/window
BenchmarkTake-2   	 1000000	       172.5 ns/op
pkg: github.com/quantumnode/qn-admission/test/load
BenchmarkStageDecode/pod-create-5k-2   	   32000	     51400 ns/op	 102.96 MB/s	    6856 B/op	      42 allocs/op
pkg: github.com/quantumnode/qn-admission/policies
BenchmarkEngineValidateRealtimeShadowed-2             	   12972	    345333 ns/op	         7.589 %judged	   15775 B/op	     274 allocs/op
ok  	github.com/quantumnode/qn-admission/policies/window	3.1s
`
	got, notes, err := ParseBenchmarks(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || notes[0] != "load average before ./webhook/: 4.90 4.70 3.70" {
		t.Errorf("notes %q", notes)
	}
	if len(got) != 4 {
		t.Fatalf("got %d benchmarks: %+v", len(got), got)
	}
	v := got[0]
	if v.Package != "webhook" || v.Name != "ValidateRealtime" || v.NsPerOp != 205000 || v.BytesPerOp != 56100 || v.AllocsPerOp != 1075 {
		t.Errorf("first: %+v", v)
	}
	w := got[1]
	if w.Package != "policies/window" || w.Name != "Take" || w.NsPerOp != 172.5 || w.BytesPerOp != -1 || w.AllocsPerOp != -1 {
		t.Errorf("second: %+v", w)
	}
	if x := got[2]; x.Name != "StageDecode/pod-create-5k" || x.BytesPerOp != 6856 || x.AllocsPerOp != 42 {
		t.Errorf("a benchmark reporting MB/s lost its B/op or allocs/op: %+v", x)
	}
	if y := got[3]; y.Name != "EngineValidateRealtimeShadowed" || y.NsPerOp != 345333 || y.BytesPerOp != 15775 || y.AllocsPerOp != 274 {
		t.Errorf("a benchmark reporting a metric of its own lost its B/op or allocs/op: %+v", y)
	}
}

// slicesOf makes n slices of a target that answered perSlice requests in
// one second each, spending cpu per request.
func slicesOf(n, perSlice int, cpu time.Duration, rss uint64, p99 time.Duration) []Slice {
	var out []Slice
	for range n {
		lat := make([]time.Duration, 1000)
		for i := range lat {
			lat[i] = time.Millisecond
		}
		lat[len(lat)-11] = p99
		for i := len(lat) - 10; i < len(lat); i++ {
			lat[i] = p99
		}
		out = append(out, Slice{
			Result: &Result{Requests: perSlice, Elapsed: time.Second, Latencies: lat},
			Server: ServerUsage{CPU: cpu * time.Duration(perSlice), MaxRSS: rss},
		})
	}
	return out
}

func TestGoalsJudgeTheIssueTargets(t *testing.T) {
	r := &Report{Scenarios: []ScenarioResult{
		{Scenario: Scenario{Name: ScenarioClosedValidate}, Slices: map[string][]Slice{
			NameWebhook:      slicesOf(3, 6000, 100*time.Microsecond, 40<<20, time.Millisecond),
			NameWebhookExtra: slicesOf(3, 5000, 100*time.Microsecond, 200<<20, time.Millisecond),
			NameOPA:          slicesOf(3, 1500, 300*time.Microsecond, 50<<20, time.Millisecond),
			NameCeiling:      slicesOf(3, 10000, 60*time.Microsecond, 17<<20, time.Millisecond),
			NameWebhookRedis: slicesOf(3, 4000, 120*time.Microsecond, 40<<20, time.Millisecond),
			// The chart's settings: qn-webhook and OPA are compared with
			// each other there, never across settings.
			WithRuntime(NameWebhook, "GOMEMLIMIT=192MiB"):      slicesOf(3, 6000, 80*time.Microsecond, 40<<20, time.Millisecond),
			WithRuntime(NameWebhookRedis, "GOMEMLIMIT=192MiB"): slicesOf(3, 4000, 100*time.Microsecond, 40<<20, time.Millisecond),
			WithRuntime(NameOPA, "GOMEMLIMIT=192MiB"):          slicesOf(3, 1500, 160*time.Microsecond, 50<<20, time.Millisecond),
		}},
		{Scenario: Scenario{Name: ScenarioOpenValidate, Load: Load{Rate: 2000}}, Slices: map[string][]Slice{
			NameWebhook: slicesOf(3, 2000, 100*time.Microsecond, 40<<20, 4*time.Millisecond),
			WithRuntime(NameWebhookRedis, "GOMEMLIMIT=192MiB"): slicesOf(3, 2000, 100*time.Microsecond, 40<<20, 5*time.Millisecond),
			NameOPA: slicesOf(3, 2000, 300*time.Microsecond, 50<<20, 6*time.Millisecond),
		}},
	}, RuntimeVariant: "GOMEMLIMIT=192MiB"}
	want := map[string]string{
		"server CPU per validate request":                                                                      "met 100 µs",
		"… better than OPA's (OPA ÷ qn-webhook, both with Go's default GC)":                                    "met 3.00×",
		"… within 2× of the ceiling's (qn-webhook ÷ ceiling)":                                                  "met 1.67×",
		"closed-loop throughput vs OPA (qn-webhook ÷ OPA)":                                                     "met 4.00×",
		"closed-loop throughput vs the ceiling":                                                                "met 60 %",
		"throughput with 1,000 policies of other roles vs without":                                             "missed 83 %",
		"open loop 2000 req/s: p99":                                                                            "missed 4.00 ms",
		"open loop 2000 req/s: p99.9":                                                                          "met 4.00 ms",
		"open loop 2000 req/s: errors":                                                                         "met 0 of 6000",
		"RSS under load, bundled policies":                                                                     "met 40.0 MiB",
		"CPU per validate request, Redis windows with redis-server's CPU ÷ OPA's, both with Go's default GC":   "met 0.40×",
		"Redis windows over the in-process store, total CPU, both with Go's default GC":                        "missed +20 %",
		"CPU per validate request, Redis windows with redis-server's CPU ÷ OPA's, both with GOMEMLIMIT=192MiB": "missed 0.62×",
		"Redis windows over the in-process store, total CPU, both with GOMEMLIMIT=192MiB":                      "missed +25 %",
		"… OPA ÷ qn-webhook, both with GOMEMLIMIT=192MiB":                                                      "missed 2.00×",
		"open loop 2000 req/s, qn-webhook, Redis windows GOMEMLIMIT=192MiB: p99 no worse than OPA's":           "met 5.00 ms",
		"RSS under load, 1,000 extra policies":                                                                 "missed 200.0 MiB",
	}
	goals := r.Goals()
	if len(goals) != len(want) {
		t.Errorf("%d goals, want %d", len(goals), len(want))
	}
	for _, g := range goals {
		verdict := "n/a"
		if g.Met != nil {
			verdict = map[bool]string{true: "met", false: "missed"}[*g.Met]
		}
		if got := verdict + " " + g.Measured; got != want[g.What] {
			t.Errorf("%s: %s, want %s", g.What, got, want[g.What])
		}
	}
	md := r.Markdown()
	if !strings.HasPrefix(md, BeginMarker+"\n") || !strings.HasSuffix(md, EndMarker+"\n") {
		t.Error("the section is not between its markers")
	}
	if !strings.Contains(md, "| throughput with 1,000 policies of other roles vs without | ≥ 90 % | 83 % | **missed** |") {
		t.Errorf("the goals table lacks a missed goal:\n%s", md)
	}
}

func TestMedianOfEvenAndOddCounts(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3,1,2 = %v", m)
	}
	if m := median([]time.Duration{4, 1, 3, 2}); m != 2 {
		t.Errorf("median of 4,1,3,2 = %v (integer midpoint of 2 and 3)", m)
	}
	if m := median[int](nil); m != 0 {
		t.Errorf("median of nothing = %v", m)
	}
}

func TestShadowComparisonTellsADifferenceFromNoiseRoundByRound(t *testing.T) {
	// slice is a slice whose every latency is d, with 100 answers.
	slice := func(d time.Duration, shadow *ShadowCounts) Slice {
		lat := make([]time.Duration, 100)
		for i := range lat {
			lat[i] = d
		}
		return Slice{Result: &Result{Requests: 100, Latencies: lat}, Server: ServerUsage{CPU: 100 * d}, Shadow: shadow}
	}
	ms := time.Millisecond
	counts := &ShadowCounts{Answered: 100, Judged: 90, Dropped: 10, Disagreed: 9}
	cases := map[string]struct {
		with, without []time.Duration
		within        *bool
		says          string
	}{
		"higher in every round is a difference": {
			with: []time.Duration{2 * ms, 3 * ms, 4 * ms}, without: []time.Duration{1 * ms, 2 * ms, 3 * ms},
			within: verdict(false), says: "not within noise: higher in each of 3 rounds",
		},
		"lower in every round is a difference too": {
			with: []time.Duration{1 * ms, 1 * ms, 1 * ms}, without: []time.Duration{2 * ms, 2 * ms, 2 * ms},
			within: verdict(false), says: "not within noise: lower in each of 3 rounds",
		},
		"higher in some rounds and lower in others is noise": {
			with: []time.Duration{2 * ms, 1 * ms, 3 * ms}, without: []time.Duration{1 * ms, 2 * ms, 2 * ms},
			within: verdict(true), says: "within noise",
		},
		"two rounds cannot tell": {
			with: []time.Duration{2 * ms, 3 * ms}, without: []time.Duration{1 * ms, 1 * ms},
			says: "too few to tell",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var with, without []Slice
			for i := range tc.with {
				with = append(with, slice(tc.with[i], counts))
				without = append(without, slice(tc.without[i], nil))
			}
			c := CompareShadow(with, without)
			got := c.P99.WithinNoise()
			if (got == nil) != (tc.within == nil) || (got != nil && *got != *tc.within) {
				t.Errorf("WithinNoise = %v, want %v (%s)", fmtVerdict(got), fmtVerdict(tc.within), c.P99)
			}
			if !strings.Contains(c.P99.Verdict(), tc.says) {
				t.Errorf("Verdict %q, want it to say %q", c.P99.Verdict(), tc.says)
			}
			n := len(tc.with)
			md := c.Markdown()
			for _, want := range []string{
				"Served p99 with a shadow vs without: " + c.P99.Verdict(),
				fmt.Sprintf("judged %d of the %d requests answered (90.0 %%) and dropped %d (10.0 %%", 90*n, 100*n, 10*n),
				fmt.Sprintf("disagreed with the served answer on %d (10.0 %% of those judged)", 9*n),
			} {
				if !strings.Contains(md, want) {
					t.Errorf("the paragraph does not say %q:\n%s", want, md)
				}
			}
		})
	}
}

func fmtVerdict(b *bool) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprint(*b)
}

// The chart's runtime setting reaches every target it names as both
// variables: OPA must not run with its default GOGC under qn-webhook's
// memory limit while qn-webhook runs with GOGC=400.
func TestRuntimeEnvSetsEveryVariableOfTheSetting(t *testing.T) {
	env, err := RuntimeEnv(ChartRuntime)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"GOGC=400", "GOMEMLIMIT=192MiB"}; !slices.Equal(env, want) {
		t.Errorf("RuntimeEnv(%q) = %q, want %q", ChartRuntime, env, want)
	}
	if env, err := RuntimeEnv(""); env != nil || err != nil {
		t.Errorf(`RuntimeEnv("") = %q, %v; want nil, nil`, env, err)
	}
	for _, bad := range []string{"GOGC", "GOGC=400 =1"} {
		if _, err := RuntimeEnv(bad); err == nil || !strings.Contains(err.Error(), "NAME=value") {
			t.Errorf("RuntimeEnv(%q): error %v, want one naming NAME=value", bad, err)
		}
	}
}
