package webhook

import (
	"context"
	"net"
	"testing"
	"time"
)

// loopback returns both ends of a TCP connection on loopback.
func loopback(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestCallerGoneReadsTheConnectionsState: a caller still connected is
// there; one that reset or closed its end is gone, before anything reads
// from the connection; an ended context is gone too.
func TestCallerGoneReadsTheConnectionsState(t *testing.T) {
	cases := map[string]struct {
		leave func(c *net.TCPConn)
		want  string
	}{
		"still connected": {leave: func(*net.TCPConn) {}},
		"reset":           {leave: func(c *net.TCPConn) { _ = c.SetLinger(0); _ = c.Close() }, want: "the caller reset its connection"},
		"closed":          {leave: func(c *net.TCPConn) { _ = c.Close() }, want: "the caller closed its connection"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			client, server := loopback(t)
			tc.leave(client.(*net.TCPConn))
			ctx := withConn(context.Background(), server)
			deadline := time.Now().Add(5 * time.Second)
			for {
				err := callerGone(ctx)
				got := ""
				if err != nil {
					got = err.Error()
				}
				if got == tc.want {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("callerGone = %q, want %q", got, tc.want)
				}
				time.Sleep(time.Millisecond) // the kernel delivers the FIN or RST
			}
		})
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := callerGone(ended); err == nil {
		t.Fatal("an ended context is not gone")
	}
}

// BenchmarkCallerGone is what the check costs a review (twice on the
// validating path: before judging and before counting).
func BenchmarkCallerGone(b *testing.B) {
	_, server := loopback(b)
	ctx := withConn(context.Background(), server)
	for b.Loop() {
		if err := callerGone(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
