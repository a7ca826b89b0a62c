package webhook

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStallsFailStrictHealthForTenSeconds: a stalled answer fails the
// strict check until ten seconds have passed, and the detail counts it.
func TestStallsFailStrictHealthForTenSeconds(t *testing.T) {
	now := time.Unix(1000, 0)
	var s Stalls
	strict, detail := s.Check(2*time.Second, func() time.Time { return now })
	if err := strict(context.Background()); err != nil {
		t.Fatalf("no stall yet: %v", err)
	}
	s.stalled(now)
	now = now.Add(9 * time.Second)
	if err := strict(context.Background()); err == nil || !strings.Contains(err.Error(), "did not read its answer within 2s, 9s ago (1 such answers") {
		t.Fatalf("a stall 9s ago: %v", err)
	}
	now = now.Add(2 * time.Second)
	if err := strict(context.Background()); err != nil {
		t.Fatalf("a stall 11s ago is forgotten: %v", err)
	}
	if d := detail(); d != "1 answers not read by their callers within 2s (connections closed)" {
		t.Fatalf("detail = %q", d)
	}
	var none *Stalls
	none.stalled(now) // a handler without Stalls counts nothing, and does not panic
}
