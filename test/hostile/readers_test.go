package hostile

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// controls are ordinary reviews sent one after another while an attack
// runs (or on a quiet server), for the figures docs/reliability.md keeps:
// how long each took and what it was answered.
type controls struct {
	took  []time.Duration
	codes map[string]int
}

// sendControls sends n ordinary reviews, one every interval, each on the
// suite's client; a transport error counts as its own code.
func (s *server) sendControls(n int, interval time.Duration) controls {
	s.t.Helper()
	c := controls{codes: map[string]int{}}
	body := review("control", "kube-apiserver", "CREATE", node("edge-2", nil, services(1)))
	for i := range n {
		if i > 0 {
			time.Sleep(interval)
		}
		began := time.Now()
		r, err := s.trySend(http.MethodPost, "/validate", "application/json", strings.NewReader(string(body)))
		c.took = append(c.took, time.Since(began))
		switch {
		case err != nil:
			c.codes["no answer"]++
		case r.status == 200 && r.review.Response.Allowed:
			c.codes["200 allowed"]++
		default:
			c.codes[fmt.Sprintf("%d/%d", r.status, r.code())]++
		}
	}
	return c
}

// percentile of the durations, nearest rank.
func (c controls) percentile(p float64) time.Duration {
	sorted := slices.Clone(c.took)
	slices.Sort(sorted)
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (c controls) String() string {
	return fmt.Sprintf("%d reviews: p50 %s, p99 %s, answers %v", len(c.took),
		c.percentile(0.5).Round(10*time.Microsecond), c.percentile(0.99).Round(10*time.Microsecond), c.codes)
}

// allAdmitted fails the test unless every control review was admitted.
func (c controls) allAdmitted(t *testing.T, during string) {
	t.Helper()
	if c.codes["200 allowed"] != len(c.took) {
		t.Fatalf("control reviews during %s were not all admitted: %s", during, c)
	}
}

// slowReaders opens n connections that pipeline reviews and never read
// an answer: the server's answers pile up in the socket buffers until its
// writes block. They are closed when the test ends.
func (s *server) slowReaders(n int) {
	s.t.Helper()
	// A denial quoting ten clashes, with a warning for each of 64
	// privileged ports: an answer of about 16 KiB.
	svcs := services(64)
	for _, svc := range svcs {
		svc.(map[string]any)["port"] = 80
	}
	body := review("unread", "mallory", "CREATE", node("edge-1", nil, svcs))
	if r := s.post("/validate", body); r.review.Response.Allowed || len(r.raw) < 8<<10 {
		s.t.Fatalf("the slow readers' review must be refused with a long answer, got HTTP %d, %d bytes", r.status, len(r.raw))
	} else {
		s.t.Logf("each unread answer is %d bytes", len(r.raw))
	}
	req := []byte(fmt.Sprintf("POST /validate HTTP/1.1\r\nHost: qn\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	var wg sync.WaitGroup
	var conns []net.Conn
	// A small receive buffer, as a reader that stopped reading ends up
	// with: the server's writes block after tens of kilobytes, not the
	// megabytes loopback's autotuning would take first.
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	for range n {
		c, err := tls.DialWithDialer(dialer, "tcp", s.proc.Address, s.tlsConfig())
		if err != nil {
			s.t.Fatal(err)
		}
		conns = append(conns, c)
		wg.Go(func() {
			// Writes block once the server stops reading; the cleanup's
			// Close ends them.
			for range 5000 {
				if _, err := c.Write(req); err != nil {
					return
				}
			}
		})
	}
	s.t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	})
}

// TestSlowReadersCannotHoldReviewSlots is round three's item 1: four
// connections that pipeline reviews and never read their answers held
// every review slot (their answers blocked while writing, slot in hand),
// so every other review got 429 for 30 s with strict health green. Now a
// review gives its slot back before its answer is written, an answer has
// --answer-write-timeout to be taken, a connection that does not take it
// is closed and counted, and strict health says so.
func TestSlowReadersCannotHoldReviewSlots(t *testing.T) {
	s := start(t, "--max-concurrent-reviews", "4", "--answer-write-timeout", "2s")
	quiet := s.sendControls(20, 50*time.Millisecond)
	t.Logf("quiet: %s", quiet)
	s.slowReaders(8)
	time.Sleep(5 * time.Second) // their answers fill the socket buffers
	during := s.sendControls(40, 100*time.Millisecond)
	t.Logf("beside 8 connections that never read: %s", during)
	during.allAdmitted(t, "the slow readers")
	s.waitFor("stalled answers are counted", func() bool { return s.metric("qn_admission_answers_stalled_total") >= 1 })
	code, body := s.probe("/healthz?strict=true&verbose")
	if code == 200 || !strings.Contains(body, "did not read") {
		t.Fatalf("strict health must say answers stalled on callers that do not read: HTTP %d\n%s", code, body)
	}
	if code, _ := s.probe("/readyz"); code != 200 {
		t.Fatalf("plain readiness must stay green: HTTP %d", code)
	}
	t.Logf("stalled answers counted: %v; %s", s.metric("qn_admission_answers_stalled_total"), detailLine(body, "answers"))
	s.normalStillWorks()
}

// emptyPromises keeps n connections open that each declare a body of
// length bytes and send nothing after the headers, opening a new one as
// each is answered (a stalled body gets 400 after a second), until the
// test ends.
func (s *server) emptyPromises(n, length int) {
	s.t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.proc.Address, s.tlsConfig())
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				fmt.Fprintf(c, "POST /validate HTTP/1.1\r\nHost: qn\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", length)
				// Wait for the answer (or the test's end), then again.
				c.SetReadDeadline(time.Now().Add(15 * time.Second))
				stop := context.AfterFunc(doneContext(done), func() { c.Close() })
				_, _ = io.Copy(io.Discard, c)
				stop()
				c.Close()
			}
		})
	}
	s.t.Cleanup(func() {
		close(done)
		wg.Wait()
	})
}

// doneContext is a context that ends when done closes.
func doneContext(done <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-done
		cancel()
	}()
	return ctx
}

// TestBodiesDeclaredButNeverSentHoldNoBudget is round three's item 2:
// connections that declare a 7 MiB body and send nothing reserved their
// whole length of the request bytes in flight until their body deadline or
// rate ended them (a second), again and again: under the chart's memory
// settings (12 MiB in flight) two added a second to every review, and
// sixteen turned most reviews into 429. A body now holds 4 KiB of room
// until its first 4 KiB arrive, then reserves the rest.
func TestBodiesDeclaredButNeverSentHoldNoBudget(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "192MiB") // the chart's: 12 MiB of request bytes in flight
	s := start(t)
	quiet := s.sendControls(20, 50*time.Millisecond)
	t.Logf("quiet: %s", quiet)
	total := 0
	for _, more := range []int{2, 14} {
		total += more
		s.emptyPromises(more, 7<<20-1)
		time.Sleep(500 * time.Millisecond)
		during := s.sendControls(20, 100*time.Millisecond)
		t.Logf("beside %d connections declaring 7 MiB and sending nothing: %s", total, during)
		during.allAdmitted(t, fmt.Sprintf("%d empty promises of 7 MiB", total))
		// Generous for a loaded machine: a quiet review takes about a
		// millisecond; one waiting for room took a second or two.
		if p50 := during.percentile(0.5); p50 > 500*time.Millisecond {
			t.Fatalf("control reviews beside %d empty promises waited for room: %s", total, during)
		}
	}
	s.normalStillWorks()
	s.memory()
}
