package load

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Target is an admission webhook server to send reviews to.
type Target struct {
	Name string
	// BaseURL is https://host:port.
	BaseURL      string
	ValidatePath string
	MutatePath   string
	RootCAs      *x509.CertPool
	// PID is the server process, for its CPU time and RSS; 0 if unknown.
	PID int
	// HelperPIDs are processes the server needs to answer (its
	// redis-server): their CPU time counts in the server's.
	HelperPIDs []int
	// Judges is true for targets that run the QuantumNode policies; their
	// decisions are checked against the fixtures' expectations. The bare
	// ceiling admits everything and is checked for a well-formed answer only.
	Judges bool
	// Revision, when set, is the policy revision every answer must name in
	// its audit annotations: the set that must have answered.
	Revision string
}

// DefaultUsers is the size of the user pool requests rotate through. Rate
// windows are per user (realtime 120, batch 30 per minute): with this many
// users no user comes near a limit below ~40,000 requests per second, so a
// run measures decisions, not 429s, while the window store holds a
// realistic number of keys.
const DefaultUsers = 8192

// Client sends reviews to one target over keep-alive HTTP/1.1 connections,
// as kube-apiserver does.
type Client struct {
	target  *Target
	http    *http.Client
	checker *Checker
	run     uint32
	seq     atomic.Uint64
	// Users is the size of the user pool (DefaultUsers if 0).
	Users int
}

// NewClient returns a client that keeps up to maxConns connections to t.
func NewClient(t *Target, maxConns int) *Client {
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: t.RootCAs, MinVersion: tls.VersionTLS12},
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		MaxConnsPerHost:     maxConns,
		IdleConnTimeout:     2 * time.Minute,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &Client{
		target:  t,
		http:    &http.Client{Transport: tr},
		checker: &Checker{Judge: t.Judges, Revision: t.Revision},
		run:     rand.Uint32(),
	}
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Load says what to send and how.
type Load struct {
	// Calls are sent in turn.
	Calls []Call
	// Concurrency is the number of requests in flight in a closed loop, and
	// the most that may be in flight in an open loop.
	Concurrency int
	// Rate, when positive, makes an open loop: request i is due at
	// start + i/Rate whether or not earlier ones were answered, and its
	// latency counts from then.
	Rate float64
	// Duration bounds the run; MaxRequests, when positive, too.
	Duration    time.Duration
	MaxRequests int
	// Timeout bounds one request (10s if 0).
	Timeout time.Duration
}

func (l Load) validate() error {
	switch {
	case len(l.Calls) == 0:
		return errors.New("load: no calls")
	case l.Concurrency <= 0:
		return errors.New("load: concurrency must be positive")
	case l.Duration <= 0:
		return errors.New("load: duration must be positive")
	case l.Rate < 0:
		return errors.New("load: rate must not be negative")
	}
	return nil
}

// Result is one run against one target.
type Result struct {
	// Requests were sent and answered or failed; Errors of them were not
	// correct answers (transport errors included).
	Requests int
	Errors   int
	// FirstErrors are the first few error messages.
	FirstErrors []string
	// Elapsed is from the start to the last answer.
	Elapsed time.Duration
	// Latencies of all requests, sorted; in an open loop measured from the
	// intended send time.
	Latencies []time.Duration
	// MaxLag is, in an open loop, the longest a request started after it
	// was due (the generator or the connection pool falling behind).
	MaxLag time.Duration
	// ClientCPU is the CPU time of this process during the run.
	ClientCPU time.Duration
}

// Throughput is answered requests per second.
func (r *Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Percentile is the nearest-rank p-th percentile latency (p in 0..100).
func (r *Result) Percentile(p float64) time.Duration { return percentile(r.Latencies, p) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

const maxFirstErrors = 5

type worker struct {
	body, uid, user bytes.Buffer
	resp            bytes.Buffer
	latencies       []time.Duration
	errors          int
	firstErrors     []string
	requests        int
	maxLag          time.Duration
	last            time.Time
}

// Run sends l to the client's target and returns what it measured. Every
// answer is checked; wrong answers count as errors, they do not stop the
// run. Run stops early when ctx ends.
func (c *Client) Run(ctx context.Context, l Load) (*Result, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	if l.Timeout <= 0 {
		l.Timeout = 10 * time.Second
	}
	users := uint64(c.Users)
	if users == 0 {
		users = DefaultUsers
	}
	var interval time.Duration
	if l.Rate > 0 {
		interval = time.Duration(float64(time.Second) / l.Rate)
	}
	cpu0 := selfCPU()
	start := time.Now()
	var next atomic.Int64
	workers := make([]*worker, l.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{latencies: make([]time.Duration, 0, 1024)}
		workers[i] = w
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if l.MaxRequests > 0 && i >= int64(l.MaxRequests) {
					return
				}
				var due time.Time
				if interval > 0 {
					due = start.Add(time.Duration(i) * interval)
					if due.Sub(start) >= l.Duration {
						return
					}
					if !sleepUntil(ctx, due) {
						return
					}
				} else {
					due = time.Now()
					if due.Sub(start) >= l.Duration {
						return
					}
				}
				call := l.Calls[int(i%int64(len(l.Calls)))]
				seq := c.seq.Add(1)
				sent := time.Now()
				if lag := sent.Sub(due); lag > w.maxLag {
					w.maxLag = lag
				}
				err := c.do(ctx, w, call, seq, (seq/uint64(len(l.Calls)))%users, l.Timeout)
				w.last = time.Now()
				w.requests++
				w.latencies = append(w.latencies, w.last.Sub(due))
				if err != nil {
					w.errors++
					if len(w.firstErrors) < maxFirstErrors {
						w.firstErrors = append(w.firstErrors, err.Error())
					}
				}
			}
		})
	}
	wg.Wait()
	res := &Result{ClientCPU: selfCPU() - cpu0}
	var last time.Time
	for _, w := range workers {
		res.Requests += w.requests
		res.Errors += w.errors
		res.Latencies = append(res.Latencies, w.latencies...)
		if len(res.FirstErrors) < maxFirstErrors {
			res.FirstErrors = append(res.FirstErrors, w.firstErrors[:min(len(w.firstErrors), maxFirstErrors-len(res.FirstErrors))]...)
		}
		res.MaxLag = max(res.MaxLag, w.maxLag)
		if w.last.After(last) {
			last = w.last
		}
	}
	if !last.IsZero() {
		res.Elapsed = last.Sub(start)
	}
	slices.Sort(res.Latencies)
	return res, ctx.Err()
}

func (c *Client) do(ctx context.Context, w *worker, call Call, seq, user uint64, timeout time.Duration) error {
	w.uid.Reset()
	w.uid.Write(appendUID(w.uid.AvailableBuffer(), c.run, seq))
	w.user.Reset()
	w.user.Write(appendUser(w.user.AvailableBuffer(), user))
	w.body.Reset()
	w.body.Write(call.Fixture.template.build(w.body.AvailableBuffer(), w.uid.Bytes(), w.user.Bytes()))
	path := c.target.ValidatePath
	if call.Mutating {
		path = c.target.MutatePath
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.target.BaseURL+path, bytes.NewReader(w.body.Bytes()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %v", call, err)
	}
	w.resp.Reset()
	_, err = w.resp.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("%s: read answer: %v", call, err)
	}
	return c.checker.Check(call, w.uid.String(), resp.StatusCode, resp.Header.Get("Content-Type"), w.resp.Bytes())
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
