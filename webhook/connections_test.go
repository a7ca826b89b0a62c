package webhook

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// poolServer serves handler over plain HTTP behind a connPool; the pool's
// logic does not depend on TLS (connState unwraps a *tls.Conn first).
func poolServer(t *testing.T, limit int, handshake time.Duration, handler http.HandlerFunc) (*connPool, string, *prometheus.Registry) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pool := newConnPool(ln, limit, handshake, reg)
	srv := &http.Server{Handler: handler, ConnState: pool.connState, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(pool)
	t.Cleanup(func() { srv.Close() })
	return pool, ln.Addr().String(), reg
}

// keepAlive is one client connection that sends requests by hand, so the
// test decides when it is idle.
type keepAlive struct {
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *keepAlive {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{conn: c, r: bufio.NewReader(c)}
}

// get sends one request and reads its answer.
func (k *keepAlive) get() (int, error) {
	k.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(k.conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// closedByServer reports whether the server has closed k (a read ends
// with EOF or a reset, not a timeout).
func (k *keepAlive) closedByServer(within time.Duration) bool {
	k.conn.SetReadDeadline(time.Now().Add(within))
	_, err := k.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func ok(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConnPool(t *testing.T) {
	t.Run("at the cap the longest-idle connection makes room for a new one", func(t *testing.T) {
		pool, addr, _ := poolServer(t, 2, time.Minute, ok)
		first, second := dial(t, addr), dial(t, addr)
		if code, err := first.get(); err != nil || code != http.StatusNoContent {
			t.Fatalf("request: %d %v", code, err)
		}
		// The server marks a connection idle after the client has its
		// answer: wait for it, so first is idle before second is used.
		waitUntil(t, "first is idle", func() bool { return pool.snapshot().idle == 1 })
		if code, err := second.get(); err != nil || code != http.StatusNoContent {
			t.Fatalf("request: %d %v", code, err)
		}
		// second was used last: first has been idle longest.
		if code, err := second.get(); err != nil || code != http.StatusNoContent {
			t.Fatalf("request: %d %v", code, err)
		}
		waitUntil(t, "both are idle", func() bool { return pool.snapshot().idle == 2 })
		third := dial(t, addr)
		if code, err := third.get(); err != nil || code != http.StatusNoContent {
			t.Fatalf("a new connection at the cap: %d %v", code, err)
		}
		if !first.closedByServer(2 * time.Second) {
			t.Fatal("the longest-idle connection is still open")
		}
		if code, err := second.get(); err != nil || code != http.StatusNoContent {
			t.Fatalf("the recently used connection was closed instead: %d %v", code, err)
		}
		if got := testutil.ToFloat64(pool.metrics.closedToAdmit.WithLabelValues("idle")); got != 1 {
			t.Fatalf("closed-to-admit idle = %v, want 1", got)
		}
		if c := pool.snapshot(); c.open != 2 {
			t.Fatalf("open = %d, want the cap 2", c.open)
		}
	})

	t.Run("at the cap an idle connection makes room before a silent one", func(t *testing.T) {
		pool, addr, _ := poolServer(t, 2, time.Minute, ok)
		silent := dial(t, addr)
		idle := dial(t, addr)
		if _, err := idle.get(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "one idle, one silent", func() bool { c := pool.snapshot(); return c.idle == 1 && c.fresh == 1 })
		if code, err := dial(t, addr).get(); err != nil || code != http.StatusNoContent {
			t.Fatalf("a new connection at the cap: %d %v", code, err)
		}
		if !idle.closedByServer(2 * time.Second) {
			t.Fatal("the idle connection is still open")
		}
		if silent.closedByServer(200 * time.Millisecond) {
			t.Fatal("the silent connection was closed although an idle one could make room")
		}
	})

	t.Run("at the cap with none idle, the oldest silent connection makes room once past its grace", func(t *testing.T) {
		// A grace of a third of the handshake timeout: 1s.
		pool, addr, _ := poolServer(t, 1, 3*time.Second, ok)
		silent := dial(t, addr)
		waitUntil(t, "one silent", func() bool { return pool.snapshot().fresh == 1 })
		began := time.Now()
		if code, err := dial(t, addr).get(); err != nil || code != http.StatusNoContent {
			t.Fatalf("a new connection at the cap: %d %v", code, err)
		}
		// Within its grace a connection that has not sent a request yet
		// (a handshake in progress) is not closed for a newcomer: in a
		// burst past the cap they closed each other's.
		if took := time.Since(began); took < 500*time.Millisecond {
			t.Fatalf("the silent connection was closed %s after the newcomer came, within its 1s grace", took)
		}
		if !silent.closedByServer(2 * time.Second) {
			t.Fatal("the silent connection is still open")
		}
		if got := testutil.ToFloat64(pool.metrics.closedToAdmit.WithLabelValues("new")); got != 1 {
			t.Fatalf("closed-to-admit new = %v, want 1", got)
		}
	})

	t.Run("a connection silent past the handshake timeout is closed", func(t *testing.T) {
		pool, addr, _ := poolServer(t, 10, 100*time.Millisecond, ok)
		silent := dial(t, addr)
		if !silent.closedByServer(3 * time.Second) {
			t.Fatal("a connection that sent nothing is still open after 3s")
		}
		waitUntil(t, "the slot is released", func() bool { return pool.snapshot().open == 0 })
		if got := testutil.ToFloat64(pool.metrics.handshakeTimeouts); got != 1 {
			t.Fatalf("handshake timeouts = %v, want 1", got)
		}
		// A connection that asks at once is not touched by the timer.
		k := dial(t, addr)
		if _, err := k.get(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if code, err := k.get(); err != nil || code != http.StatusNoContent {
			t.Fatalf("a keep-alive connection past the handshake timeout: %d %v", code, err)
		}
	})

	t.Run("when every connection serves a request a new one waits, and strict health says so", func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		pool, addr, _ := poolServer(t, 1, time.Minute, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				started <- struct{}{}
				<-release
			}
			w.WriteHeader(http.StatusNoContent)
		})
		holder := dial(t, addr)
		fmt.Fprintf(holder.conn, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
		<-started
		answered := make(chan error, 1)
		go func() {
			_, err := dial(t, addr).get()
			answered <- err
		}()
		strict, detail := pool.saturationCheck(time.Now)
		waitUntil(t, "the new connection waits", func() bool { return strict() != nil })
		if err := strict(); !strings.Contains(err.Error(), "saturated") {
			t.Fatalf("strict: %v", err)
		}
		select {
		case err := <-answered:
			t.Fatalf("the new connection was served past the cap: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		if err := <-answered; err != nil {
			t.Fatalf("the waiting connection once a request finished: %v", err)
		}
		if got := testutil.ToFloat64(pool.metrics.waits); got != 1 {
			t.Fatalf("waits = %v, want 1", got)
		}
		if d := detail(); !strings.Contains(d, "of 1 open") {
			t.Fatalf("detail: %s", d)
		}
	})
}
