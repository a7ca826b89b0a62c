package hostile

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// rawRequest sends head (the request line and headers, without the blank
// line) and body on a new TLS connection and reads one answer.
func (s *server) rawRequest(head, body string) (*http.Response, []byte, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", s.proc.Address, s.tlsConfig())
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, head+"\r\n\r\n"+body); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, raw, err
}

// TestRequestsNetHTTPCannotReadGetAReview: requests whose framing or
// headers net/http refuses before any handler runs (two Transfer-Encoding
// headers, a coding other than chunked, a header line that is not one)
// get an AdmissionReview that says what was wrong, with the status
// net/http chose. Before, they got a text/plain "Unsupported transfer
// encoding" (501) or "Bad Request" (400) that is no AdmissionReview.
func TestRequestsNetHTTPCannotReadGetAReview(t *testing.T) {
	s := start(t)
	body := string(review("te", "alice", "CREATE", node("edge-1", nil, services(1))))
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	const post = "POST /validate HTTP/1.1\r\nHost: qn\r\nContent-Type: application/json\r\n"
	cases := map[string]struct {
		head, body  string
		wantStatus  int
		wantMessage string
	}{
		"two Transfer-Encoding headers": {
			head: post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", body: chunked,
			wantStatus: 501, wantMessage: "Transfer-Encoding",
		},
		"Transfer-Encoding: gzip, chunked": {
			head: post + "Transfer-Encoding: gzip, chunked", body: chunked,
			wantStatus: 501, wantMessage: "Transfer-Encoding",
		},
		"Transfer-Encoding: identity beside a Content-Length": {
			head: post + fmt.Sprintf("Transfer-Encoding: identity\r\nContent-Length: %d", len(body)), body: body,
			wantStatus: 501, wantMessage: "Transfer-Encoding",
		},
		"a header line without a colon": {
			head: post + "Content-Length: 2\r\nthis is no header", body: "{}",
			wantStatus: 400, wantMessage: "headers",
		},
		"two different Content-Lengths": {
			head: post + "Content-Length: 2\r\nContent-Length: 3", body: "{}",
			wantStatus: 400, wantMessage: "Content-Length",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s.t = t
			resp, raw, err := s.rawRequest(tc.head, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			var rev admissionv1.AdmissionReview
			if err := json.Unmarshal(raw, &rev); err != nil || rev.Kind != "AdmissionReview" || rev.Response == nil || rev.Response.Result == nil {
				t.Fatalf("HTTP %d %s is not a well-formed AdmissionReview: %q", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
			}
			msg := rev.Response.Result.Message
			if resp.StatusCode != tc.wantStatus || rev.Response.Result.Code != int32(tc.wantStatus) || rev.Response.Allowed ||
				!strings.Contains(msg, tc.wantMessage) || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("want HTTP %d, a denial with code %d saying %q; got HTTP %d %s: %s", tc.wantStatus, tc.wantStatus, tc.wantMessage, resp.StatusCode, resp.Header.Get("Content-Type"), raw)
			}
			t.Logf("HTTP %d: %s", resp.StatusCode, msg)
			s.normalStillWorks()
		})
	}
}
