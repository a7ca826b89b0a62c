package load

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// Scenario is one way of loading every target, measured in several slices.
type Scenario struct {
	// Name is short and stable (closed-validate); Title says it in words.
	Name, Title string
	Mutating    bool
	// Load without Calls (the suite sends the fixture mix).
	Load Load
	// Targets are the names of the servers loaded, in the order slices
	// alternate through them.
	Targets []string
}

// Slice is one measured run of one target.
type Slice struct {
	Result *Result
	Server ServerUsage
	// OtherCPU is CPU time the rest of the machine (neither the servers
	// nor this process) used during the slice, all cores; OtherNiceCPU is
	// the part of it at a positive nice value, which yields to the run.
	OtherCPU     time.Duration
	OtherNiceCPU time.Duration
	// WallCPU is the machine's CPU capacity during the slice (wall time ×
	// cores), to put OtherCPU in proportion.
	WallCPU time.Duration
	// Shadow is what a shadowed server's shadow did with the slice's
	// requests (nil for other servers).
	Shadow *ShadowCounts
}

// CPUPerRequest is server CPU time per answered request.
func (s Slice) CPUPerRequest() time.Duration {
	if s.Result.Requests == 0 {
		return 0
	}
	return s.Server.CPU / time.Duration(s.Result.Requests)
}

// ClientCPUPerRequest is the load generator's CPU time per request.
func (s Slice) ClientCPUPerRequest() time.Duration {
	if s.Result.Requests == 0 {
		return 0
	}
	return s.Result.ClientCPU / time.Duration(s.Result.Requests)
}

// ScenarioResult holds every slice of every target of one scenario.
type ScenarioResult struct {
	Scenario Scenario
	// Slices[target][i] is the i-th slice of that target.
	Slices map[string][]Slice
}

// Suite loads several servers in alternating slices: A, B, C, A, B, C …,
// so a noisy machine affects every target alike, and summaries are medians.
type Suite struct {
	Servers  map[string]*Server
	Fixtures []*Fixture
	// Slices per target per scenario, after one unmeasured warm-up slice.
	Slices int
	Warmup time.Duration
	// Log receives progress lines (nil: none).
	Log io.Writer

	clients map[string]*Client
}

// Run measures each scenario in turn.
func (s *Suite) Run(ctx context.Context, scenarios []Scenario) ([]ScenarioResult, error) {
	if s.Log == nil {
		s.Log = io.Discard
	}
	if s.clients == nil {
		s.clients = map[string]*Client{}
	}
	defer func() {
		for _, c := range s.clients {
			c.Close()
		}
	}()
	var out []ScenarioResult
	for _, sc := range scenarios {
		r, err := s.runScenario(ctx, sc)
		if err != nil {
			return out, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Suite) client(name string, conns int) (*Client, error) {
	srv, ok := s.Servers[name]
	if !ok {
		return nil, fmt.Errorf("no server named %q", name)
	}
	key := fmt.Sprintf("%s/%d", name, conns)
	c, ok := s.clients[key]
	if !ok {
		c = NewClient(srv.Target, conns)
		s.clients[key] = c
	}
	return c, nil
}

func (s *Suite) runScenario(ctx context.Context, sc Scenario) (ScenarioResult, error) {
	res := ScenarioResult{Scenario: sc, Slices: map[string][]Slice{}}
	load := sc.Load
	load.Calls = Mix(s.Fixtures, sc.Mutating)
	res.Scenario.Load.Calls = load.Calls
	if s.Warmup > 0 {
		warm := load
		warm.Duration = s.Warmup
		for _, name := range sc.Targets {
			c, err := s.client(name, load.Concurrency)
			if err != nil {
				return res, err
			}
			if err := s.runSettled(ctx, c, s.Servers[name], warm); err != nil {
				return res, err
			}
		}
	}
	for i := range s.Slices {
		for _, name := range sc.Targets {
			c, err := s.client(name, load.Concurrency)
			if err != nil {
				return res, err
			}
			sl, err := s.slice(ctx, c, s.Servers[name], load)
			if err != nil {
				return res, fmt.Errorf("%s slice %d: %w", name, i+1, err)
			}
			res.Slices[name] = append(res.Slices[name], sl)
			fmt.Fprintf(s.Log, "%-16s %-26s slice %d/%d: %7.0f req/s  p50 %-8s p99 %-8s server CPU %5.0f µs/req  RSS %5.1f MiB  errors %d\n",
				sc.Name, name, i+1, s.Slices, sl.Result.Throughput(), round(sl.Result.Percentile(50)), round(sl.Result.Percentile(99)),
				micros(sl.CPUPerRequest()), mib(sl.Server.MaxRSS), sl.Result.Errors)
			if sh := sl.Shadow; sh != nil {
				fmt.Fprintf(s.Log, "    shadow: %d answered, %d judged, %d dropped, %d disagreements\n", sh.Answered, sh.Judged, sh.Dropped, sh.Disagreed)
			}
			for _, e := range sl.Result.FirstErrors {
				fmt.Fprintf(s.Log, "    error: %s\n", e)
			}
		}
	}
	return res, nil
}

// shadowSettle bounds the wait for a shadow to work through its queue
// after a slice: at its CPU share a full queue takes well under a second.
const shadowSettle = time.Minute

// runSettled is an unmeasured run (a warm-up) that leaves no shadow work
// behind to be counted in the next slice.
func (s *Suite) runSettled(ctx context.Context, c *Client, srv *Server, load Load) error {
	var base ShadowCounts
	if srv.Shadowed() {
		var err error
		if base, err = srv.ShadowCounts(ctx); err != nil {
			return err
		}
	}
	if _, err := c.Run(ctx, load); err != nil {
		return err
	}
	if srv.Shadowed() {
		_, err := srv.WaitShadow(ctx, base, shadowSettle)
		return err
	}
	return nil
}

func (s *Suite) slice(ctx context.Context, c *Client, srv *Server, load Load) (Slice, error) {
	var shadow *ShadowCounts
	if srv.Shadowed() {
		base, err := srv.ShadowCounts(ctx)
		if err != nil {
			return Slice{}, err
		}
		shadow = &base
	}
	m0, err := harness.ReadMachineCPU()
	if err != nil {
		return Slice{}, err
	}
	sampler, err := StartSampler(srv.PID, 50*time.Millisecond, srv.HelperPIDs...)
	if err != nil {
		return Slice{}, err
	}
	start := time.Now()
	r, runErr := c.Run(ctx, load)
	// A shadow still judging the slice's requests spends the server's CPU
	// on them: the slice's CPU time ends when its queue is worked through.
	var shadowErr error
	if shadow != nil && runErr == nil {
		*shadow, shadowErr = srv.WaitShadow(ctx, *shadow, shadowSettle)
	}
	wall := time.Since(start)
	usage, err := sampler.Stop()
	if runErr != nil {
		return Slice{}, runErr
	}
	if shadowErr != nil {
		return Slice{}, shadowErr
	}
	if err != nil {
		return Slice{}, err
	}
	m1, err := harness.ReadMachineCPU()
	if err != nil {
		return Slice{}, err
	}
	cores := time.Duration(numCPU())
	other := (m1.Busy - m0.Busy) - usage.CPU - r.ClientCPU
	return Slice{Result: r, Server: usage, OtherCPU: max(other, 0), OtherNiceCPU: min(m1.Nice-m0.Nice, max(other, 0)), WallCPU: wall * cores, Shadow: shadow}, nil
}

// Summary is the medians of a target's slices.
type Summary struct {
	Throughput        float64
	P50, P90, P99     time.Duration
	P999, Max         time.Duration
	CPUPerRequest     time.Duration
	ClientCPUPerReq   time.Duration
	MaxRSS            uint64 // the largest of all slices
	Requests, Errors  int    // sums
	OtherCPUShare     float64
	MaxLag            time.Duration // the largest of all slices
	Slices            int
	ThroughputSpread  [2]float64 // min and max over slices
	CPUPerRequestSpan [2]time.Duration
}

// Summarize reduces slices to medians.
func Summarize(ss []Slice) Summary {
	var s Summary
	s.Slices = len(ss)
	if len(ss) == 0 {
		return s
	}
	var tput []float64
	var p50, p90, p99, p999, mx, cpu, ccpu []time.Duration
	var other []float64
	for _, sl := range ss {
		r := sl.Result
		tput = append(tput, r.Throughput())
		p50 = append(p50, r.Percentile(50))
		p90 = append(p90, r.Percentile(90))
		p99 = append(p99, r.Percentile(99))
		p999 = append(p999, r.Percentile(99.9))
		mx = append(mx, r.Percentile(100))
		cpu = append(cpu, sl.CPUPerRequest())
		ccpu = append(ccpu, sl.ClientCPUPerRequest())
		if sl.WallCPU > 0 {
			other = append(other, float64(sl.OtherCPU)/float64(sl.WallCPU))
		}
		s.MaxRSS = max(s.MaxRSS, sl.Server.MaxRSS)
		s.Requests += r.Requests
		s.Errors += r.Errors
		s.MaxLag = max(s.MaxLag, r.MaxLag)
	}
	s.Throughput = median(tput)
	s.P50, s.P90, s.P99, s.P999, s.Max = median(p50), median(p90), median(p99), median(p999), median(mx)
	s.CPUPerRequest, s.ClientCPUPerReq = median(cpu), median(ccpu)
	s.OtherCPUShare = median(other)
	s.ThroughputSpread = [2]float64{extreme(tput, false), extreme(tput, true)}
	s.CPUPerRequestSpan = [2]time.Duration{extreme(cpu, false), extreme(cpu, true)}
	return s
}

// Ratio is the median over slice rounds of f(a_i)/f(b_i): each round's
// slices ran back to back, so the machine's noise largely cancels.
func Ratio(a, b []Slice, f func(Slice) float64) float64 {
	return median(roundRatios(a, b, f))
}

// roundRatios are f(a_i)/f(b_i) for each slice round i.
func roundRatios(a, b []Slice, f func(Slice) float64) []float64 {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if d := f(b[i]); d != 0 {
			rs = append(rs, f(a[i])/d)
		}
	}
	return rs
}

func median[T int | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func extreme[T int | float64 | time.Duration](xs []T, biggest bool) T {
	if len(xs) == 0 {
		return 0
	}
	if biggest {
		return slices.Max(xs)
	}
	return slices.Min(xs)
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

func numCPU() int {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 1
	}
	n := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "cpu") && len(line) > 3 && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return max(n, 1)
}
