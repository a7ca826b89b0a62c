package load

import (
	"sync"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// ServerUsage is what a server process spent during one slice.
type ServerUsage struct {
	CPU time.Duration
	// MaxRSS is the largest VmRSS seen while sampling.
	MaxRSS uint64
}

// Sampler watches a process during a slice: CPU time at start and stop,
// and VmRSS every interval in between.
type Sampler struct {
	pid   int
	start harness.ProcStats
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	max   uint64
}

// StartSampler begins a slice for pid.
func StartSampler(pid int, every time.Duration) (*Sampler, error) {
	s0, err := harness.ReadProc(pid)
	if err != nil {
		return nil, err
	}
	s := &Sampler{pid: pid, start: s0, max: s0.RSS, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				if st, err := harness.ReadProc(pid); err == nil {
					s.mu.Lock()
					s.max = max(s.max, st.RSS)
					s.mu.Unlock()
				}
			}
		}
	}()
	return s, nil
}

// Stop ends the slice and returns the CPU time spent and the peak RSS seen.
func (s *Sampler) Stop() (ServerUsage, error) {
	close(s.stop)
	<-s.done
	end, err := harness.ReadProc(s.pid)
	if err != nil {
		return ServerUsage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServerUsage{CPU: end.CPU - s.start.CPU, MaxRSS: max(s.max, end.RSS)}, nil
}
