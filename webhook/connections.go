package webhook

import (
	"container/list"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultHandshakeTimeout is how long a new connection has to finish its
// TLS handshake and send its first request's headers. The API server's
// client does both at once, in milliseconds; a socket that stays silent
// holds a connection slot for nothing.
const DefaultHandshakeTimeout = 3 * time.Second

// connectionWaitLimit bounds how long a new connection waits for a slot when
// every open connection is serving a request; then it is closed, and the
// caller (the API server retries a reset connection) tries again.
const connectionWaitLimit = 2 * time.Second

// freshGraceShare is the share of the handshake timeout a new connection
// has before it can be closed to admit another (1 s by default): a burst
// of new connections past the cap (API servers reconnecting at once)
// then waits for slots as handshakes finish, instead of each newcomer
// closing the oldest handshake in progress (1,200 at once got 1,060
// answers, 2,000 about a thousand); a socket that stays silent is still
// closed for a newcomer once past it.
const freshGraceShare = 3

// saturationMemory is how long strict health remembers that a new
// connection found every slot serving a request.
const saturationMemory = 10 * time.Second

// connPool caps the open connections of a listener without letting idle
// ones starve new callers. When the cap is reached, Accept closes the
// connection that serves nobody: the longest-idle keep-alive connection
// first, then the oldest one that has not sent a request yet (a stalled
// handshake). Only when every connection is serving a request does a new
// one wait. A connection that has not sent its first request's headers
// within the handshake timeout is closed, whatever the count.
//
// The http.Server reports each connection's state through connState, so
// the pool knows which connections are idle without reading their bytes.
type connPool struct {
	net.Listener
	limit            int
	handshakeTimeout time.Duration

	mu sync.Mutex
	// fresh holds connections that have not sent a request yet, idle the
	// keep-alive ones between requests; each list oldest first.
	fresh, idle list.List
	open        int
	active      int
	// room is signalled (without blocking) whenever a slot may have freed.
	room chan struct{}

	// lastWait is when (unix nanoseconds) a new connection last found
	// every slot serving a request.
	lastWait atomic.Int64
	metrics  connMetrics
}

// connMetrics count what the pool did; nil counters are not recorded.
type connMetrics struct {
	closedToAdmit     *prometheus.CounterVec
	handshakeTimeouts prometheus.Counter
	waits             prometheus.Counter
	refused           prometheus.Counter
}

// pooledConn is one accepted connection and its place in the pool.
type pooledConn struct {
	net.Conn
	pool      *connPool
	state     http.ConnState // StateNew, StateActive or StateIdle while open
	elem      *list.Element  // in fresh or idle; nil while active
	closed    bool
	closeOnce sync.Once
	timer     *time.Timer
	// admitted is when the pool admitted it.
	admitted time.Time
}

// newConnPool wraps ln. reg, when set, receives the pool's series.
func newConnPool(ln net.Listener, limit int, handshakeTimeout time.Duration, reg prometheus.Registerer) *connPool {
	if handshakeTimeout <= 0 {
		handshakeTimeout = DefaultHandshakeTimeout
	}
	p := &connPool{Listener: ln, limit: max(1, limit), handshakeTimeout: handshakeTimeout, room: make(chan struct{}, 1)}
	if reg != nil {
		p.register(reg)
	}
	return p
}

func (p *connPool) register(reg prometheus.Registerer) {
	counts := func(name, help string, value func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value)
	}
	p.metrics = connMetrics{
		closedToAdmit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qn_admission_connections_closed_to_admit_total",
			Help: "Connections closed at the connection cap to admit a new one, by the state they were in (idle: a keep-alive connection between requests; new: no request sent yet).",
		}, []string{"state"}),
		handshakeTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qn_admission_connection_handshake_timeouts_total",
			Help: "Connections closed because they did not finish the TLS handshake and send a request's headers within --handshake-timeout.",
		}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qn_admission_connection_waits_total",
			Help: "New connections that found every connection slot serving a request and had to wait: the cap is saturated.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qn_admission_connections_refused_total",
			Help: "New connections closed because no slot freed within 2s while every connection served a request.",
		}),
	}
	reg.MustRegister(p.metrics.closedToAdmit, p.metrics.handshakeTimeouts, p.metrics.waits, p.metrics.refused,
		counts("qn_admission_connections_open", "Open connections on the admission listener.", func() float64 { return float64(p.snapshot().open) }),
		counts("qn_admission_connections_active", "Admission connections serving a request now.", func() float64 { return float64(p.snapshot().active) }),
		counts("qn_admission_connections_limit", "The admission listener's connection cap (--max-connections, lowered to the descriptor limit).", func() float64 { return float64(p.limit) }),
	)
	p.metrics.closedToAdmit.WithLabelValues("idle")
	p.metrics.closedToAdmit.WithLabelValues("new")
}

// connCounts is a consistent view of the pool.
type connCounts struct{ open, active, idle, fresh int }

func (p *connPool) snapshot() connCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return connCounts{open: p.open, active: p.active, idle: p.idle.Len(), fresh: p.fresh.Len()}
}

// Accept returns the next connection once it has a slot.
func (p *connPool) Accept() (net.Conn, error) {
	for {
		c, err := p.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if pc := p.slotFor(c); pc != nil {
			return pc, nil
		}
	}
}

// slotFor admits c, closing an idle or silent connection when the pool is
// full. When every connection is serving a request it waits up to
// connectionWaitLimit for one to finish; then it closes c and returns nil.
func (p *connPool) slotFor(c net.Conn) *pooledConn {
	waited := false
	deadline := time.Now().Add(connectionWaitLimit)
	for {
		now := time.Now()
		p.mu.Lock()
		if p.open < p.limit {
			pc := p.admitLocked(c, now)
			p.mu.Unlock()
			return pc
		}
		victim, from, ripe := p.victimLocked(now)
		p.mu.Unlock()
		if victim != nil {
			if m := p.metrics.closedToAdmit; m != nil {
				m.WithLabelValues(from).Inc()
			}
			// Closing releases its slot (pooledConn.Close); the loop then
			// admits c.
			victim.Close()
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			c.Close()
			if p.metrics.refused != nil {
				p.metrics.refused.Inc()
			}
			return nil
		}
		if ripe.IsZero() {
			// Every open connection is serving a request.
			p.lastWait.Store(now.UnixNano())
			if !waited && p.metrics.waits != nil {
				p.metrics.waits.Inc()
			}
			waited = true
		} else {
			// Handshakes in progress: wait for one to finish, or for
			// the oldest to pass its grace.
			left = min(left, max(ripe.Sub(now), time.Millisecond))
		}
		timer := time.NewTimer(left)
		select {
		case <-p.room:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// admitLocked registers c as a new connection that has not sent a request.
func (p *connPool) admitLocked(c net.Conn, now time.Time) *pooledConn {
	pc := &pooledConn{Conn: c, pool: p, state: http.StateNew, admitted: now}
	pc.elem = p.fresh.PushBack(pc)
	p.open++
	pc.timer = time.AfterFunc(p.handshakeTimeout, pc.handshakeExpired)
	return pc
}

// victimLocked picks the connection to close so a new one can open: the
// longest-idle keep-alive connection, else the oldest that has sent no
// request yet once past its grace (a share of the handshake timeout). It
// takes it out of its list. With none, ripe is when the oldest handshake
// in progress passes its grace (zero when every connection serves a
// request).
func (p *connPool) victimLocked(now time.Time) (victim *pooledConn, state string, ripe time.Time) {
	if e := p.idle.Front(); e != nil {
		pc := e.Value.(*pooledConn)
		p.idle.Remove(e)
		pc.elem = nil
		return pc, "idle", time.Time{}
	}
	if e := p.fresh.Front(); e != nil {
		pc := e.Value.(*pooledConn)
		if ripe := pc.admitted.Add(p.handshakeTimeout / freshGraceShare); now.Before(ripe) {
			return nil, "", ripe
		}
		p.fresh.Remove(e)
		pc.elem = nil
		return pc, "new", time.Time{}
	}
	return nil, "", time.Time{}
}

// handshakeExpired closes a connection that is still waiting for its first
// request when the handshake timeout fires.
func (c *pooledConn) handshakeExpired() {
	p := c.pool
	p.mu.Lock()
	expired := !c.closed && c.state == http.StateNew
	p.mu.Unlock()
	if expired {
		if p.metrics.handshakeTimeouts != nil {
			p.metrics.handshakeTimeouts.Inc()
		}
		c.Close()
	}
}

// connState follows the http.Server's view of each connection; it is the
// server's ConnState hook.
func (p *connPool) connState(nc net.Conn, state http.ConnState) {
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok { // TLS, answering or not
		nc = tc.NetConn()
	}
	c, ok := nc.(*pooledConn)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.closed {
		return
	}
	switch state {
	case http.StateActive:
		if c.elem != nil {
			c.listOf().Remove(c.elem)
			c.elem = nil
		}
		if c.state != http.StateActive {
			p.active++
		}
		c.state = http.StateActive
		c.timer.Stop()
	case http.StateIdle:
		if c.state == http.StateActive {
			p.active--
		}
		if c.elem != nil {
			c.listOf().Remove(c.elem)
		}
		c.state = http.StateIdle
		c.elem = p.idle.PushBack(c)
		p.signal()
	}
	// StateNew is set at admission; StateClosed and StateHijacked arrive
	// through Close.
}

// listOf is the list that holds c in its current state.
func (c *pooledConn) listOf() *list.List {
	if c.state == http.StateIdle {
		return &c.pool.idle
	}
	return &c.pool.fresh
}

// signal wakes a waiting Accept without blocking.
func (p *connPool) signal() {
	select {
	case p.room <- struct{}{}:
	default:
	}
}

// Close releases the connection's slot once, whoever closes it first.
func (c *pooledConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		p := c.pool
		c.timer.Stop()
		p.mu.Lock()
		c.closed = true
		if c.elem != nil {
			c.listOf().Remove(c.elem)
			c.elem = nil
		}
		if c.state == http.StateActive {
			p.active--
		}
		p.open--
		p.mu.Unlock()
		p.signal()
	})
	return err
}

// saturationCheck fails strict health while new connections have recently
// found every slot serving a request (a caller holding connections busy, or
// a cap too low for the API servers' traffic); the detail shows the counts.
func (p *connPool) saturationCheck(now func() time.Time) (strict func() error, detail func() string) {
	strict = func() error {
		last := p.lastWait.Load()
		if last == 0 {
			return nil
		}
		if ago := now().Sub(time.Unix(0, last)); ago < saturationMemory {
			c := p.snapshot()
			return fmt.Errorf("the admission connection cap is saturated: %s ago a new connection found all %d connections serving requests (%d open, limit %d); raise --max-connections or find the caller holding them",
				ago.Round(time.Millisecond), c.active, c.open, p.limit)
		}
		return nil
	}
	detail = func() string {
		c := p.snapshot()
		return fmt.Sprintf("%d of %d open (%d serving a request, %d idle, %d before their first request)", c.open, p.limit, c.active, c.idle, c.fresh)
	}
	return strict, detail
}
