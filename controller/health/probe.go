package health

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// ProbeTarget is one QuantumNode's active check: its ports on its Node's
// address.
type ProbeTarget struct {
	Key     types.NamespacedName
	Address string
	Ports   []ProbePort
	Period  time.Duration
	Timeout time.Duration
	// MaxFailures is the policy's; the prober reports counts up to one
	// above it, which is all the state machine distinguishes.
	MaxFailures int
}

// ProbePort is one port to check: HTTPPath set means an HTTP GET.
type ProbePort struct {
	Name     string
	Port     int32
	HTTPPath string
}

// ProbeResult is a port's check history, as far as health needs it.
type ProbeResult struct {
	Port int32
	// Failures counts failed checks in a row, capped at MaxFailures+1.
	Failures int
	// Error is the last failure.
	Error string
}

// Prober runs the active checks of every tracked QuantumNode, each every
// period, on a bounded pool of workers, and calls Notify with a node's key
// when a result changes what its health could be (a first failure, one
// more in a row up to the threshold, a success after failures). The
// reconciler tracks a node while a policy asks for its check.
type Prober struct {
	// Notify is called from a worker; it must not block for long.
	Notify func(types.NamespacedName)
	// Workers bounds the checks running at once; default 16.
	Workers int
	// Clock schedules the checks; default the real clock.
	Clock clock.WithTicker

	mu      sync.Mutex
	targets map[types.NamespacedName]*tracked
	queue   schedule
	wake    chan struct{}
}

type tracked struct {
	target  ProbeTarget
	results map[string]ProbeResult
	next    time.Time
	index   int  // in the schedule heap; -1 while being checked
	gone    bool // forgotten while being checked
}

// NewProber returns a prober; Start runs it.
func NewProber(notify func(types.NamespacedName)) *Prober {
	return &Prober{Notify: notify, targets: map[types.NamespacedName]*tracked{}, wake: make(chan struct{}, 1)}
}

// Track starts or updates a node's check. Results survive an update that
// keeps the address and the ports.
func (p *Prober) Track(t ProbeTarget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.targets[t.Key]; ok {
		if sameTarget(cur.target, t) {
			return
		}
		if cur.target.Address != t.Address {
			cur.results = map[string]ProbeResult{}
		}
		cur.target = t
		return
	}
	tr := &tracked{target: t, results: map[string]ProbeResult{}, next: p.clock().Now()}
	p.targets[t.Key] = tr
	heap.Push(&p.queue, tr)
	p.poke()
}

// Forget stops a node's check and drops its results.
func (p *Prober) Forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr, ok := p.targets[key]
	if !ok {
		return
	}
	delete(p.targets, key)
	tr.gone = true
	if tr.index >= 0 {
		heap.Remove(&p.queue, tr.index)
	}
}

// Results returns a copy of a node's results by service name; nil when it
// is not tracked.
func (p *Prober) Results(key types.NamespacedName) map[string]ProbeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr, ok := p.targets[key]
	if !ok {
		return nil
	}
	out := make(map[string]ProbeResult, len(tr.results))
	for k, v := range tr.results {
		out[k] = v
	}
	return out
}

// Tracked is how many nodes are checked.
func (p *Prober) Tracked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.targets)
}

// NeedLeaderElection: checks run where the ladder runs, on the leader.
func (p *Prober) NeedLeaderElection() bool { return true }

// Start checks every tracked node when it is due until ctx ends.
func (p *Prober) Start(ctx context.Context) error {
	workers := p.Workers
	if workers <= 0 {
		workers = 16
	}
	jobs := make(chan *tracked)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tr := range jobs {
				p.check(ctx, tr)
			}
		}()
	}
	defer wg.Wait()
	defer close(jobs)
	clk := p.clock()
	for {
		p.mu.Lock()
		var due *tracked
		wait := time.Hour
		if p.queue.Len() > 0 {
			head := p.queue[0]
			if d := head.next.Sub(clk.Now()); d > 0 {
				wait = d
			} else {
				due = heap.Pop(&p.queue).(*tracked)
			}
		}
		p.mu.Unlock()
		if due != nil {
			select {
			case jobs <- due:
			case <-ctx.Done():
				return nil
			}
			continue
		}
		timer := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-p.wake:
		case <-timer.C():
		}
		timer.Stop()
	}
}

// check runs one node's checks, records them, reschedules the node and
// notifies when its results changed.
func (p *Prober) check(ctx context.Context, tr *tracked) {
	p.mu.Lock()
	t := tr.target
	p.mu.Unlock()
	outcomes := make(map[string]error, len(t.Ports))
	for _, port := range t.Ports {
		outcomes[port.Name] = Check(ctx, t.Address, port, t.Timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if tr.gone {
		return
	}
	changed := false
	if sameTarget(tr.target, t) {
		limit := tr.target.MaxFailures + 1
		for _, port := range t.Ports {
			prev := tr.results[port.Name]
			r := ProbeResult{Port: port.Port}
			if err := outcomes[port.Name]; err != nil {
				r.Failures, r.Error = min(prev.Failures+1, limit), err.Error()
			}
			if _, seen := tr.results[port.Name]; !seen || r != prev {
				changed = true
			}
			tr.results[port.Name] = r
		}
	}
	tr.next = p.clock().Now().Add(tr.target.Period)
	heap.Push(&p.queue, tr)
	p.poke()
	if changed && p.Notify != nil {
		p.Notify(t.Key)
	}
}

func (p *Prober) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Prober) clock() clock.WithTicker {
	if p.Clock == nil {
		return clock.RealClock{}
	}
	return p.Clock
}

func sameTarget(a, b ProbeTarget) bool {
	if a.Address != b.Address || a.Period != b.Period || a.Timeout != b.Timeout || a.MaxFailures != b.MaxFailures || len(a.Ports) != len(b.Ports) {
		return false
	}
	for i := range a.Ports {
		if a.Ports[i] != b.Ports[i] {
			return false
		}
	}
	return true
}

// Check runs one check of port on address within timeout: a TCP connect,
// or, with an HTTP path, a GET whose status must be below 400 (redirects
// are not followed). The error says what failed, in words stable from one
// check to the next (it ends up in a condition message).
func Check(ctx context.Context, address string, port ProbePort, timeout time.Duration) error {
	if address == "" {
		return errors.New("the Node reports no address")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hostPort := net.JoinHostPort(address, strconv.Itoa(int(port.Port)))
	if port.HTTPPath == "" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", hostPort)
		if err != nil {
			return stable(err, timeout)
		}
		return conn.Close()
	}
	url := "http://" + hostPort + port.HTTPPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	req.Header.Set("User-Agent", "qn-controller/health")
	resp, err := probeClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, stable(errors.Unwrap(err), timeout))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// probeClient keeps no connections: a check must open its own, or it
// would only prove that an old connection is still up.
var probeClient = &http.Client{
	Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// stable turns a deadline into one sentence, whatever layer noticed it.
func stable(err error, timeout time.Duration) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("no answer within %s", timeout)
	}
	return err
}

// schedule is a min-heap of tracked nodes by their next check.
type schedule []*tracked

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].next.Before(s[j].next) }
func (s schedule) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].index, s[j].index = i, j
}
func (s *schedule) Push(x any) {
	tr := x.(*tracked)
	tr.index = len(*s)
	*s = append(*s, tr)
}
func (s *schedule) Pop() any {
	old := *s
	tr := old[len(old)-1]
	old[len(old)-1] = nil
	tr.index = -1
	*s = old[:len(old)-1]
	return tr
}
