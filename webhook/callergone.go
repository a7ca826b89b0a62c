package webhook

import (
	"context"
	"fmt"
	"net"
)

// connKey carries a request's connection in its context
// (http.Server.ConnContext), so the handler can ask the kernel whether
// the caller is still there.
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// callerGone says why a request's caller will read no answer, nil while
// it waits for one: the request's context ended (net/http's read of the
// connection saw it reset or closed, or the server stops), or the kernel
// already holds the connection's reset or end, which net/http's read may
// not have reported yet. A caller that sends a review and resets at once
// was otherwise judged, and counted in its rate window, microseconds
// before the context ended (14 of 20 such reviews took a slot).
func callerGone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("the request's context ended (%w)", context.Cause(ctx))
	}
	c, _ := ctx.Value(connKey{}).(net.Conn)
	return connGone(socketOf(c))
}

// socketOf is the TCP connection under c, nil when there is none.
func socketOf(c net.Conn) net.Conn {
	for c != nil {
		switch v := c.(type) {
		case interface{ NetConn() net.Conn }: // TLS, answering or not
			c = v.NetConn()
		case *pooledConn:
			c = v.Conn
		default:
			return c
		}
	}
	return nil
}
