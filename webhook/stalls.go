package webhook

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultAnswerWriteTimeout is how long an answer may take to leave: the
// API server reads it as soon as it is sent, and gives up on the whole
// call after the webhook's timeout (at most 10 s) anyway.
const DefaultAnswerWriteTimeout = 5 * time.Second

// stallMemory is how long strict health remembers a stalled answer.
const stallMemory = 10 * time.Second

// Stalls counts answers their callers did not take within the answer
// write timeout: a caller that sends reviews and does not read the
// answers (pipelined on one connection, the answers piling up in the
// socket buffers). Each such connection is closed. Review slots are given
// back before an answer is written, so a stalled answer holds none; it
// holds its request's bytes until its write timeout. The zero value is
// ready to use; nothing is counted on the path of an answer that leaves.
type Stalls struct {
	total atomic.Int64
	last  atomic.Int64 // Unix nanoseconds of the latest stall
}

// stalled records one answer cut by its write deadline.
func (s *Stalls) stalled(now time.Time) {
	if s == nil {
		return
	}
	s.total.Add(1)
	s.last.Store(now.UnixNano())
}

// Total is how many answers stalled since the start.
func (s *Stalls) Total() int64 { return s.total.Load() }

// Check fails strict health while an answer has stalled within the last
// 10 s; detail is the count. timeout is the answer write timeout, for the
// message.
func (s *Stalls) Check(timeout time.Duration, now func() time.Time) (strict func(context.Context) error, detail func() string) {
	if now == nil {
		now = time.Now
	}
	strict = func(context.Context) error {
		last := s.last.Load()
		if last == 0 {
			return nil
		}
		if ago := now().Sub(time.Unix(0, last)); ago < stallMemory {
			return fmt.Errorf("a caller did not read its answer within %s, %s ago (%d such answers since the start; each connection was closed, and none held a review slot): find the caller that sends reviews without reading the answers",
				timeout, ago.Round(time.Millisecond), s.total.Load())
		}
		return nil
	}
	detail = func() string {
		return fmt.Sprintf("%d answers not read by their callers within %s (connections closed)", s.total.Load(), timeout)
	}
	return strict, detail
}
