package app

import (
	"context"
	"io"
	"net/http"
	"time"
)

// requestTimeout bounds every request to the API server but watches: a
// request that has not been answered and read within d is cancelled, so a
// stalled API server (or a connection it never answers on) fails the
// request and its reconcile retries, instead of holding a worker forever.
//
// Not rest.Config.Timeout: client-go makes that the http.Client's
// Timeout, which also cuts every watch stream at d, and the informers
// would re-watch every 30 s. A watch's own length is the API server's
// (the reflector asks for 5–10 minutes with timeoutSeconds).
func requestTimeout(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		if d <= 0 {
			return next
		}
		return &timeoutTransport{next: next, timeout: d}
	}
}

type timeoutTransport struct {
	next    http.RoundTripper
	timeout time.Duration
}

// RoundTrip implements http.RoundTripper.
func (t *timeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if isWatch(req) {
		return t.next.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.timeout)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	// The deadline holds until the body is read and closed, as
	// http.Client.Timeout's does.
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// isWatch says whether req is a watch: ?watch=true (or 1), as client-go
// asks for one.
func isWatch(req *http.Request) bool {
	switch req.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return false
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
