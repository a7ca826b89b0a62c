package load

import (
	"sync"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// ServerUsage is what a server process spent during one slice.
type ServerUsage struct {
	// CPU is the server's and its helpers' CPU time; HelperCPU the
	// helpers' part of it.
	CPU, HelperCPU time.Duration
	// MaxRSS is the largest VmRSS seen while sampling.
	MaxRSS uint64
}

// Sampler watches a process during a slice: CPU time at start and stop,
// and VmRSS every interval in between; and the CPU time of its helpers.
type Sampler struct {
	pid     int
	helpers []int
	start   harness.ProcStats
	// helpersStart is the helpers' CPU time at the start.
	helpersStart time.Duration
	stop         chan struct{}
	done         chan struct{}
	mu           sync.Mutex
	max          uint64
}

// StartSampler begins a slice for pid, counting the CPU time of helpers
// (processes pid needs to answer, such as its redis-server) in its own.
func StartSampler(pid int, every time.Duration, helpers ...int) (*Sampler, error) {
	s0, err := harness.ReadProc(pid)
	if err != nil {
		return nil, err
	}
	h0, err := helpersCPU(helpers)
	if err != nil {
		return nil, err
	}
	s := &Sampler{pid: pid, helpers: helpers, start: s0, helpersStart: h0, max: s0.RSS, stop: make(chan struct{}), done: make(chan struct{})}
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

// Stop ends the slice and returns the CPU time spent (the helpers'
// included) and the peak RSS seen (the server's own).
func (s *Sampler) Stop() (ServerUsage, error) {
	close(s.stop)
	<-s.done
	end, err := harness.ReadProc(s.pid)
	if err != nil {
		return ServerUsage{}, err
	}
	h1, err := helpersCPU(s.helpers)
	if err != nil {
		return ServerUsage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServerUsage{CPU: end.CPU - s.start.CPU + h1 - s.helpersStart, HelperCPU: h1 - s.helpersStart, MaxRSS: max(s.max, end.RSS)}, nil
}

func helpersCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		st, err := harness.ReadProc(pid)
		if err != nil {
			return 0, err
		}
		sum += st.CPU
	}
	return sum, nil
}
