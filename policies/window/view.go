package window

import "context"

// View is a Counter that reads another Counter's windows and changes
// nothing: PeekWith is the other's, TakeWith answers as the window would
// (admitted while it has room) but records nothing, and Release does
// nothing. A shadow evaluation counts through a View, so it sees the
// windows the served answers count in without ever taking a slot.
type View struct {
	counter Counter
	// skipKey is a window whose count holds one change the view leaves
	// out: the served request's own slot, so the shadow sees the window
	// as it was before the request, as the served policies did.
	skipKey string
}

var _ Counter = (*View)(nil)

// NewView reads c's windows; skipKey ("" for none) names the window in
// which one change, the request's own, is left out.
func NewView(c Counter, skipKey string) *View { return &View{counter: c, skipKey: skipKey} }

// PeekWith implements Counter.
func (v *View) PeekWith(ctx context.Context, onErr OnStoreError, key string, limit Limit) (Answer, error) {
	a, err := v.counter.PeekWith(ctx, onErr, key, limit)
	if err == nil && key == v.skipKey && a.State.Count > 0 {
		a.State.Count--
		a.State.Remaining++
		a.State.RetryAfter = 0
	}
	return a, err
}

// TakeWith implements Counter: the answer Take would give, recording
// nothing.
func (v *View) TakeWith(ctx context.Context, onErr OnStoreError, key string, limit Limit, _ string) (Answer, error) {
	a, err := v.PeekWith(ctx, onErr, key, limit)
	if err != nil || a.State.Remaining == 0 {
		return a, err
	}
	a.Admitted = true
	a.State.Count++
	a.State.Remaining--
	// A receipt of its own, so the engine reads the window before this
	// change from it (Taken.Before) and gives it back to the View alone.
	a.Receipt = Receipt{recorded: true}
	return a, nil
}

// Release implements Counter: a View recorded nothing to give back.
func (v *View) Release(context.Context, string, Receipt) error { return nil }
