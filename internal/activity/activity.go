// Package activity counts the requests a server is serving, so that
// background work which must not slow them (the shadow policy set's
// judgements) can use the moments when there are none.
package activity

import "sync/atomic"

// Activity is the count of requests in progress. The webhook handler calls
// Begin and End around each request, from its first byte read to its
// answer written.
type Activity struct {
	inProgress atomic.Int64
	// idled holds a signal when the count last fell to zero.
	idled chan struct{}
}

// New returns an Activity with no request in progress.
func New() *Activity { return &Activity{idled: make(chan struct{}, 1)} }

// Begin counts a request in.
func (a *Activity) Begin() { a.inProgress.Add(1) }

// End counts a request out, signalling Idled when none is left.
func (a *Activity) End() {
	if a.inProgress.Add(-1) == 0 {
		select {
		case a.idled <- struct{}{}:
		default:
		}
	}
}

// Idle says no request is being served.
func (a *Activity) Idle() bool { return a.inProgress.Load() == 0 }

// Idled receives when the count has fallen to zero since it was last
// received from. It holds one signal at most, so one waiter should
// receive: a moment signalled and not received stays signalled, and
// every wake-up is to be checked with Idle.
func (a *Activity) Idled() <-chan struct{} { return a.idled }
