package webhook

import (
	"testing"
	"time"
)

// TestABodysReadDeadlineMovesWithItsPace: the first deadline is the grace,
// then it moves as the body arrives, only when the rate's due time passes
// the one set (not before every read), never past the body deadline; with
// no rate the body deadline alone applies.
func TestABodysReadDeadlineMovesWithItsPace(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	var sets []time.Time
	p := &bodyPace{start: t0, deadline: t0.Add(10 * time.Second), rate: 1 << 20, set: func(d time.Time) error { sets = append(sets, d); return nil }}
	if got := p.first(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("first deadline %s after the headers, want the 1s grace", got.Sub(t0))
	}
	steps := []struct {
		received int64
		moves    bool
		to       time.Duration // after t0, to the millisecond, when it moves
	}{
		{0, true, time.Second + bodyPaceSlack},
		{1000, false, 0},
		{200 << 10, false, 0},
		{512 << 10, true, 1500*time.Millisecond + bodyPaceSlack},
		{20 << 20, true, 10 * time.Second},
		{30 << 20, false, 0},
	}
	for _, st := range steps {
		n := len(sets)
		p.expect(st.received)
		switch {
		case !st.moves && len(sets) != n:
			t.Fatalf("after %d bytes the deadline moved to %s; it had room", st.received, sets[len(sets)-1].Sub(t0))
		case st.moves && len(sets) != n+1:
			t.Fatalf("after %d bytes the deadline did not move from %s", st.received, p.current.Sub(t0))
		case st.moves && sets[n].Sub(t0).Round(time.Millisecond) != st.to.Round(time.Millisecond):
			t.Fatalf("after %d bytes the deadline moved to %s, want %s", st.received, sets[n].Sub(t0), st.to)
		}
	}
	off := &bodyPace{start: t0, deadline: t0.Add(10 * time.Second), set: func(time.Time) error { t.Fatal("moved with no rate"); return nil }}
	if got := off.first(); !got.Equal(off.deadline) {
		t.Fatalf("with no rate the first deadline is %s, want the body deadline", got.Sub(t0))
	}
	off.expect(1 << 30)
}
