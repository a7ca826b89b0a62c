package health

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// AnswerWindow is the span the error ratio is computed over.
const AnswerWindow = 10 * time.Second

// MinAnswersForRatio is how many answers the window needs before the error
// ratio can fail a check: two failures in the first three requests after a
// start say little.
const MinAnswersForRatio = 20

// Answers counts answers and failed answers (evaluation errors, onError
// answers, our own 500s) over the last AnswerWindow, in one-second
// buckets. Record is on the request path: one atomic compare-and-swap,
// no lock, no allocation. The zero value is ready to use.
type Answers struct {
	buckets [10]atomic.Uint64
	// now is time.Now unless a test sets it.
	now func() time.Time
}

// Each bucket packs the second it counts (24 bits), its answers (20 bits)
// and its failures (20 bits) into one word, so a bucket is reset and
// counted in one CAS and never mixes two seconds.
const (
	countBits = 20
	countMax  = 1<<countBits - 1
	stampBits = 24
	stampMask = 1<<stampBits - 1
)

func pack(stamp, total, failed uint64) uint64 {
	return stamp<<(2*countBits) | total<<countBits | failed
}

func unpack(w uint64) (stamp, total, failed uint64) {
	return w >> (2 * countBits), (w >> countBits) & countMax, w & countMax
}

func (a *Answers) second() int64 {
	if a.now != nil {
		return a.now().Unix()
	}
	return time.Now().Unix()
}

// Record counts one answer; failed says whether it came from a failure.
func (a *Answers) Record(failed bool) {
	sec := a.second()
	stamp := uint64(sec) & stampMask
	f := uint64(0)
	if failed {
		f = 1
	}
	b := &a.buckets[sec%int64(len(a.buckets))]
	for {
		old := b.Load()
		st, total, fails := unpack(old)
		next := pack(stamp, 1, f)
		if st == stamp {
			if total == countMax {
				return // a million answers in one second: the ratio is known well enough
			}
			next = pack(stamp, total+1, fails+f)
		}
		if b.CompareAndSwap(old, next) {
			return
		}
	}
}

// Totals are the answers and failures of the last AnswerWindow.
func (a *Answers) Totals() (total, failed uint64) {
	sec := a.second()
	for i := range a.buckets {
		st, t, f := unpack(a.buckets[i].Load())
		// A bucket counts if its second is one of the last ten.
		age := (uint64(sec) - st) & stampMask
		if age < uint64(len(a.buckets)) {
			total += t
			failed += f
		}
	}
	return total, failed
}

// RatioCheck fails when more than maxRatio of the last AnswerWindow's
// answers failed, once there are MinAnswersForRatio of them.
func (a *Answers) RatioCheck(maxRatio float64) func(context.Context) error {
	return func(context.Context) error {
		total, failed := a.Totals()
		if total < MinAnswersForRatio || float64(failed) <= maxRatio*float64(total) {
			return nil
		}
		return fmt.Errorf("%d of the last %s's %d answers (%.2f %%) came from an evaluation error or our own failure; the limit is %.2f %% (see qn_admission_policy_eval_errors_total and the decision log)",
			failed, AnswerWindow, total, 100*float64(failed)/float64(total), 100*maxRatio)
	}
}

// Detail is the window's figures for ?verbose.
func (a *Answers) Detail() string {
	total, failed := a.Totals()
	return fmt.Sprintf("%d answers, %d failed in the last %s", total, failed, AnswerWindow)
}
