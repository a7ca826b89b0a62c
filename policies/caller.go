package policies

import (
	"context"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type callerKey struct{}

// WithCaller returns ctx carrying gone, which says why the request's
// caller will read no answer (nil while it waits for one). The webhook
// sets it to what the kernel knows of the connection, which a reset
// reaches before the request's context does.
func WithCaller(ctx context.Context, gone func() error) context.Context {
	return context.WithValue(ctx, callerKey{}, gone)
}

// CallerGone says why the caller of the request ctx belongs to went away:
// ctx ended, or the check WithCaller set says so. nil while it waits.
func CallerGone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("the request's context ended (%w)", context.Cause(ctx))
	}
	if gone, ok := ctx.Value(callerKey{}).(func() error); ok && gone != nil {
		return gone()
	}
	return nil
}

// callerGoneDecision answers a change whose caller went away before it
// was counted: it is not judged and takes no slot. The answer reaches
// nobody; the decision log and the webhook's metrics say what happened.
func callerGoneDecision(p *Plan, err error) Decision {
	d := Deny(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf(
		"not judged: the caller went away before this change was counted in role %q's rate window, so it took no slot (%v)", p.Role, err))
	d.CallerGone = true
	return d
}
