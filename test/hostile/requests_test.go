package hostile

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// TestBothWebhooksRefuseTheSameMalformedRequests: /mutate used to answer
// 500 for a write without its object and to admit an UPDATE or DELETE
// without the stored object, which /validate refuses. A malformed request
// now gets the same 400, with the same message, from both.
func TestBothWebhooksRefuseTheSameMalformedRequests(t *testing.T) {
	s := start(t)
	obj := node("edge-1", nil, services(1))
	without := func(op string, object, old any) []byte {
		var r map[string]any
		if err := json.Unmarshal(review("malformed", "alice", op, object), &r); err != nil {
			t.Fatal(err)
		}
		req := r["request"].(map[string]any)
		if object == nil {
			delete(req, "object")
		}
		if old != nil {
			req["oldObject"] = old
		}
		b, _ := json.Marshal(r)
		return b
	}
	for name, tc := range map[string]struct {
		body []byte
		want string
	}{
		"a CREATE without its object":   {without("CREATE", nil, nil), "request.object is missing"},
		"an UPDATE without its object":  {without("UPDATE", nil, obj), "request.object is missing"},
		"an UPDATE without the old one": {without("UPDATE", obj, nil), "request.oldObject is missing"},
		"a DELETE without the old one":  {without("DELETE", nil, nil), "request.oldObject is missing"},
		"an unknown operation":          {review("malformed", "alice", "PATCH", obj), `request.operation "PATCH"`},
	} {
		t.Run(name, func(t *testing.T) {
			s.t = t
			validated, mutated := s.post("/validate", tc.body), s.post("/mutate", tc.body)
			for path, r := range map[string]reply{"/validate": validated, "/mutate": mutated} {
				if r.status != 200 || r.review.Response.Allowed || r.code() != 400 || !strings.Contains(r.message(), tc.want) {
					t.Errorf("%s: want a 400 denial saying %q, got HTTP %d %.300s", path, tc.want, r.status, r.raw)
				}
			}
			if validated.message() != mutated.message() {
				t.Errorf("the webhooks disagree:\n /validate %s\n /mutate   %s", validated.message(), mutated.message())
			}
		})
	}
	s.normalStillWorks()
}

// TestAStalledBodyGetsA400: a request whose body stops after its headers
// used to hold the connection until the 30s read deadline, which also
// ended the write deadline, so the caller got an undecryptable TLS record.
// The body has its own deadline, and the answer is a well-formed 400.
func TestAStalledBodyGetsA400(t *testing.T) {
	s := start(t, "--request-body-timeout", "2s")
	c, err := tls.Dial("tcp", s.proc.Address, s.tlsConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	began := time.Now()
	fmt.Fprintf(c, "POST /validate HTTP/1.1\r\nHost: qn\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\":")
	c.SetReadDeadline(time.Now().Add(40 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	took := time.Since(began)
	if err != nil {
		t.Fatalf("no readable answer to a stalled body after %s: %v", took, err)
	}
	defer resp.Body.Close()
	var rev admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&rev); err != nil || rev.Response == nil || rev.Response.Result == nil {
		t.Fatalf("HTTP %d is not a well-formed AdmissionReview: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != 400 || rev.Response.Result.Code != 400 || !strings.Contains(rev.Response.Result.Message, "stalled: 14 of 1000 bytes") {
		t.Fatalf("want a 400 saying the body stalled, got HTTP %d %+v", resp.StatusCode, rev.Response.Result)
	}
	if took > 10*time.Second {
		t.Fatalf("the 2s body deadline answered after %s", took)
	}
	t.Logf("a stalled body answered in %s: %s", took, rev.Response.Result.Message)
	s.normalStillWorks()
}
