package hostile

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// handshakeBurst opens n new connections at once, each sending one review
// (a TLS handshake, a request, no keep-alive), and counts the admitted
// answers.
func (s *server) handshakeBurst(n int) (answered int, took time.Duration) {
	s.t.Helper()
	body := string(review("burst", "kube-apiserver", "CREATE", node("edge-2", nil, services(1))))
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
				TLSClientConfig: s.tlsConfig(), DisableKeepAlives: true,
				DialContext: (&net.Dialer{Timeout: 30 * time.Second}).DialContext, TLSHandshakeTimeout: 30 * time.Second,
			}}
			<-start
			req, _ := http.NewRequest(http.MethodPost, s.proc.URL("/validate"), strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	return int(ok.Load()), time.Since(began)
}

// TestAHandshakeBurstPastTheCapIsAnswered is round three's item 5: a burst
// of new connections past the connection cap evicted handshakes in
// progress, each newcomer the oldest of them, so 1,200 at once got no
// answer and 2,000 got 512-958 (round one answered all 2,000).
//
// The cap is 1,000. A handshake in progress is now closed for a newcomer
// only past a third of the handshake timeout (1 s); on two cores shared
// with other builds a burst's handshakes can take longer than that, so
// how many were closed is a figure logged here, not a bound (runs: 0-46 of
// 1,200, against 14-184 before); the rule itself is held by webhook's
// TestConnPool. What is asserted: of each burst, 1,000 are answered or ran
// out of their own handshake time (the machine's share of CPU decides
// which), so at most the rest were closed to admit another; and the
// server answers normally after it.
func TestAHandshakeBurstPastTheCapIsAnswered(t *testing.T) {
	s := start(t)
	closedNew := func() float64 { return s.metric(`qn_admission_connections_closed_to_admit_total{state="new"}`) }
	for _, n := range []int{1200, 2000} {
		closedBefore, timeoutsBefore := closedNew(), s.metric("qn_admission_connection_handshake_timeouts_total")
		answered, took := s.handshakeBurst(n)
		closed, timeouts := closedNew()-closedBefore, s.metric("qn_admission_connection_handshake_timeouts_total")-timeoutsBefore
		t.Logf("a burst of %d new connections: %d answered in %s; %v handshakes in progress closed to admit another, %v past the handshake timeout",
			n, answered, took.Round(time.Millisecond), closed, timeouts)
		// On two cores shared with other suites (make test runs the
		// one-node cluster and the e2e suite beside this, under -race) a
		// burst can spend most handshakes past their own timeout, 1,200
		// too (230 answered and 780 timed out in one such run; 1,097
		// answered alone): those count as served by the rule (the
		// caller's own time ran out), evictions do not.
		if served := answered + int(timeouts); served < 1000 {
			t.Errorf("a burst of %d new connections past the cap of 1000: only %d answered (%v past their handshake timeout)", n, answered, timeouts)
		}
	}
	s.normalStillWorks()
}
