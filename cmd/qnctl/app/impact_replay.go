package app

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/quantumnode/qn-admission/policies"
)

// job is one recorded request for a replay worker.
type job struct {
	seq    int
	kind   string
	rep    replayed
	report *inputReport
}

// replayer judges recorded requests on parallel workers, one per CPU.
// Requests are independent but for rate windows: two requests that count
// against one window must be judged in order, by one pair of engines. So
// requests go to workers by whose windows they count in: by user when
// every windowed role of both sets keys its window by user, by namespace
// when every one keys it by namespace; otherwise (a role-wide window, or
// both kinds) one worker judges them all, in order.
type replayer struct {
	c       *comparison
	shardBy func(*admissionv1.AdmissionRequest) string
	seed    maphash.Seed
	queues  []chan job
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc

	mu  sync.Mutex
	err error
}

func (c *comparison) newReplayer(ctx context.Context) *replayer {
	r := &replayer{c: c, seed: maphash.MakeSeed()}
	r.ctx, r.cancel = context.WithCancel(ctx)
	workers := 1
	keys := windowKeys(c.base)
	for k := range windowKeys(c.proposed) {
		keys[k] = true
	}
	switch {
	case len(keys) == 0 || len(keys) == 1 && keys[policies.KeyUser]:
		r.shardBy = func(req *admissionv1.AdmissionRequest) string { return req.UserInfo.Username }
		workers = min(runtime.GOMAXPROCS(0), 8)
	case len(keys) == 1 && keys[policies.KeyNamespace]:
		r.shardBy = func(req *admissionv1.AdmissionRequest) string { return req.Namespace }
		workers = min(runtime.GOMAXPROCS(0), 8)
	}
	for range workers {
		q := make(chan job, 256)
		r.queues = append(r.queues, q)
		r.wg.Go(func() { r.work(q) })
	}
	return r
}

// windowKeys are the window key kinds of a set's roles.
func windowKeys(s *policies.Set) map[policies.WindowKey]bool {
	out := map[policies.WindowKey]bool{}
	for _, role := range s.Roles.Roles {
		if role.Window != nil {
			out[role.Window.Key] = true
		}
	}
	return out
}

// errStopped ends reading the inputs once a worker failed; wait says why.
var errStopped = errors.New("replay stopped")

// submit queues one request; it fails once a worker has failed.
func (r *replayer) submit(kind string, rep replayed, report *inputReport) error {
	r.c.mu.Lock()
	r.c.seq++
	j := job{seq: r.c.seq, kind: kind, rep: rep, report: report}
	r.c.mu.Unlock()
	q := r.queues[0]
	if len(r.queues) > 1 {
		q = r.queues[maphash.String(r.seed, r.shardBy(rep.Request))%uint64(len(r.queues))]
	}
	select {
	case q <- j:
		return nil
	case <-r.ctx.Done():
		return errStopped
	}
}

// work judges one queue's requests in order with its own engines.
func (r *replayer) work(q <-chan job) {
	var jp *judgePair
	for j := range q {
		if r.ctx.Err() != nil {
			continue // drain after a failure
		}
		if jp == nil {
			jp = r.c.pair(j.rep.Time)
		}
		if err := r.c.request(r.ctx, jp, j); err != nil {
			r.mu.Lock()
			if r.err == nil {
				r.err = err
			}
			r.mu.Unlock()
			r.cancel()
		}
	}
}

// wait ends the replay: it waits for every queued request and returns
// the first failure. Nothing is submitted after it.
func (r *replayer) wait() error {
	for _, q := range r.queues {
		close(q)
	}
	r.wg.Wait()
	r.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
