package hostile

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sendAndReset sends body to path on a new TLS connection, then resets
// the connection (SO_LINGER 0: an RST, not a FIN) without reading the
// answer, as a caller that timed out and went away does. qn-webhook is
// stopped (SIGSTOP) from the handshake's end until the reset is sent, so
// it finds the review and the reset in the kernel together, every time:
// on a loaded machine it could otherwise judge the review between the
// caller's write and its reset, when the caller was still there.
func (s *server) sendAndReset(path string, body []byte) error {
	raw, err := net.DialTimeout("tcp", s.proc.Address, 10*time.Second)
	if err != nil {
		return err
	}
	tc := raw.(*net.TCPConn)
	c := tlsClient(raw, s)
	if err := c.Handshake(); err != nil {
		raw.Close()
		return err
	}
	if err := s.proc.Signal(syscall.SIGSTOP); err != nil {
		raw.Close()
		return err
	}
	defer s.proc.Signal(syscall.SIGCONT)
	if err := waitStopped(s.proc.PID()); err != nil {
		raw.Close()
		return err
	}
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: qn\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body); err != nil {
		raw.Close()
		return err
	}
	if err := tc.SetLinger(0); err != nil {
		raw.Close()
		return err
	}
	return raw.Close()
}

// decisionLines are the decision log lines for uid.
func (s *server) decisionLines(uid string) []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(s.proc.Logs(), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == "admission decision" && entry["uid"] == uid {
			out = append(out, entry)
		}
	}
	return out
}

// windowCount is the window count the decision line of uid reports.
func (s *server) windowCount(uid string) float64 {
	s.t.Helper()
	s.waitFor("the decision of "+uid+" is logged", func() bool { return len(s.decisionLines(uid)) > 0 })
	lines := s.decisionLines(uid)
	if len(lines) != 1 {
		s.t.Fatalf("want one decision line for %s, got %d", uid, len(lines))
	}
	w, _ := lines[0]["window"].(map[string]any)
	n, _ := w["count"].(float64)
	return n
}

// TestAReviewWhoseCallerResetIsNotCounted: reviews whose caller reset the
// connection as soon as it had sent them are not judged and take no slot
// of the requester's rate window: the next review of the same requester
// is the first change counted, and each reset one is counted as abandoned
// instead of answered. Before, most were judged, admitted and counted
// (the reset reached the kernel before the judging, and net/http's read
// of the connection reported it after), and the rest were answered as
// errors that blamed the window store or the evaluation deadline.
func TestAReviewWhoseCallerResetIsNotCounted(t *testing.T) {
	s := start(t)
	const resets = 20
	for i := range resets {
		body := review(fmt.Sprintf("reset-%d", i), "mallory", "CREATE", node("edge-1", nil, services(2)))
		if err := s.sendAndReset("/validate", body); err != nil {
			t.Fatal(err)
		}
	}
	abandoned := func(stage string) float64 {
		return max(0, s.metricLabelled(`qn_admission_abandoned_reviews_total{stage="`+stage+`",webhook="validate"}`))
	}
	s.waitFor("every reset review is counted as abandoned", func() bool { return abandoned("judging")+abandoned("counting") >= resets })
	for i := range resets {
		for _, e := range s.decisionLines(fmt.Sprintf("reset-%d", i)) {
			t.Errorf("a review whose caller reset the connection was judged: %v", e)
		}
	}
	r := s.post("/validate", review("after-resets", "mallory", "CREATE", node("edge-1", nil, services(2))))
	if !r.review.Response.Allowed {
		t.Fatalf("the review after the resets was refused: %s", r.raw)
	}
	count := s.windowCount("after-resets")
	t.Logf("%d reviews sent and reset: %v abandoned before judging, %v before counting; the next review of the same requester is change %v of its window",
		resets, abandoned("judging"), abandoned("counting"), count)
	if count != 1 {
		t.Fatalf("the review after %d reset ones is change %v of its window; want 1 (a reset review takes no slot)", resets, count)
	}
}

func tlsClient(raw net.Conn, s *server) *tls.Conn {
	cfg := s.tlsConfig()
	cfg.ServerName = "localhost"
	return tls.Client(raw, cfg)
}

// waitStopped waits until every thread of pid is stopped: a signal is
// delivered after kill returns, and a thread running on another core
// could otherwise still read what is sent next.
func waitStopped(pid int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		stopped := 0
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				continue // a thread that just ended
			}
			// The state follows the command name in parentheses.
			if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
				stopped++
			}
		}
		if stopped == len(tasks) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("qn-webhook (pid %d) did not stop within 10s of SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}
