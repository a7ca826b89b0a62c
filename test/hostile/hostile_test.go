package hostile

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMalformedRequestsGetAClearAnswer sends the shapes of broken input an
// attacker tries first. Each gets an AdmissionReview with a status and a
// message that says what was wrong; memory stays bounded; the next normal
// request is admitted.
func TestMalformedRequestsGetAClearAnswer(t *testing.T) {
	s := start(t)
	valid := review("u-1", "alice", "CREATE", node("edge-1", nil, services(2)))
	deep := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"deep","object":` +
		strings.Repeat("[", 1_000_000) + strings.Repeat("]", 1_000_000) + `}}`)
	cases := map[string]struct {
		method, path, contentType string
		body                      io.Reader
		wantStatus                int
		wantCode                  int32
		wantMessage               string
	}{
		"a body that is not JSON": {
			body: strings.NewReader("<xml/>"), wantStatus: 400, wantCode: 400, wantMessage: "not an AdmissionReview",
		},
		"a truncated review": {
			body: bytes.NewReader(valid[:len(valid)/2]), wantStatus: 400, wantCode: 400, wantMessage: "unexpected end of JSON input",
		},
		"a duplicate key in the envelope": {
			body:       strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","kind":"AdmissionReview","request":{"uid":"dup"}}`),
			wantStatus: 200, wantCode: 400, wantMessage: `duplicate field "kind"`,
		},
		"a duplicate key deep inside the object": {
			body:       strings.NewReader(strings.Replace(string(valid), `"arch":"arm64"`, `"arch":"arm64","arch":"amd64"`, 1)),
			wantStatus: 200, wantCode: 400, wantMessage: "request.object is ambiguous",
		},
		"a million nested arrays": {
			body: bytes.NewReader(deep), wantStatus: 413, wantCode: 413, wantMessage: "deeper than 100 levels",
		},
		"a 100 MiB stream without a length": {
			body: io.LimitReader(zeroes{}, 100<<20), wantStatus: 413, wantCode: 413, wantMessage: "request body exceeds",
		},
		"a GET": {
			method: http.MethodGet, body: http.NoBody, wantStatus: 405, wantCode: 405, wantMessage: "the apiserver sends POST",
		},
		"a PUT": {
			method: http.MethodPut, body: bytes.NewReader(valid), wantStatus: 405, wantCode: 405, wantMessage: "method PUT is not allowed",
		},
		"a Content-Type that is not JSON": {
			contentType: "text/plain", body: bytes.NewReader(valid), wantStatus: 415, wantCode: 415, wantMessage: "send application/json",
		},
		"a Content-Type of 32 KiB": {
			contentType: "application/" + strings.Repeat("j", 32<<10), body: bytes.NewReader(valid), wantStatus: 415, wantCode: 415, wantMessage: "bytes)",
		},
		"an unknown path": {
			path: "/admin", body: bytes.NewReader(valid), wantStatus: 404, wantCode: 404, wantMessage: "use /validate or /mutate",
		},
		"an unknown operation": {
			body:       bytes.NewReader(review("op", "alice", "PATCH", node("edge-1", nil, services(1)))),
			wantStatus: 200, wantCode: 400, wantMessage: `request.operation "PATCH" is not one of`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s.t = t
			method, path, ct := tc.method, tc.path, tc.contentType
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/validate"
			}
			if ct == "" {
				ct = "application/json"
			}
			r := s.send(method, path, ct, tc.body)
			if r.status != tc.wantStatus || r.code() != tc.wantCode || r.review.Response.Allowed || !strings.Contains(r.message(), tc.wantMessage) {
				t.Fatalf("want HTTP %d, code %d, a denial saying %q; got HTTP %d %.400s", tc.wantStatus, tc.wantCode, tc.wantMessage, r.status, r.raw)
			}
			if len(r.message()) > 4096+32 {
				t.Fatalf("the message is %d bytes, over the 4 KiB bound", len(r.message()))
			}
			s.normalStillWorks()
			s.memory()
		})
	}
}

type zeroes struct{}

func (zeroes) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestMadeUpRolesDoNotGrowMetrics is finding 1: each distinct qn-role value
// used to mint a metric series forever.
func TestMadeUpRolesDoNotGrowMetrics(t *testing.T) {
	s := start(t)
	for i := range 300 {
		role := fmt.Sprintf("role-%d-%s", i, strings.Repeat("r", 64<<10))
		r := s.post("/mutate", review(fmt.Sprintf("role-%d", i), "alice", "CREATE", node("edge-1", map[string]string{"qn-role": role}, services(1))))
		if r.status != 200 || !r.review.Response.Allowed {
			t.Fatalf("the mutating webhook leaves an unknown role's object alone, got %.300s", r.raw)
		}
	}
	metrics, err := s.proc.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`(?m)^qn_admission_requests_total\{.*$`).FindAllString(metrics, -1)
	if len(series) > 5 || len(metrics) > 256<<10 {
		t.Fatalf("300 made-up roles left %d request series and a %d-byte /metrics page:\n%s", len(series), len(metrics), strings.Join(series, "\n"))
	}
	if !strings.Contains(metrics, `role="unknown"`) {
		t.Fatalf("made-up roles count under role=\"unknown\":\n%s", strings.Join(series, "\n"))
	}
	s.normalStillWorks()
	s.memory()
}

// TestHugeCallerStringsAreClipped is findings 2 and 7: 1 MiB usernames,
// uids and roles used to make 1 MiB decision lines and answers; the role
// also came back whole in the answer's audit annotations, which the API
// server writes to its audit log. Both webhooks answer a few KiB.
func TestHugeCallerStringsAreClipped(t *testing.T) {
	s := start(t)
	huge := strings.Repeat("u", 1<<20)
	for i := range 50 {
		path := [...]string{"/validate", "/mutate"}[i%2]
		uid := fmt.Sprintf("uid-%d", i)
		r := s.post(path, review(uid, huge, "CREATE", node("edge-1", map[string]string{"qn-role": huge}, services(1))))
		if r.status != 200 || string(r.review.Response.UID) != uid {
			t.Fatalf("%s: want an answer that echoes the uid, got HTTP %d", path, r.status)
		}
		if len(r.raw) > 16<<10 {
			t.Fatalf("%s: a 1 MiB user and role made a %d-byte answer: %.300s…", path, len(r.raw), r.raw)
		}
		if role := r.review.Response.AuditAnnotations["role"]; len(role) > 300 {
			t.Fatalf("%s: the role audit annotation is %d bytes", path, len(role))
		}
		if path == "/mutate" {
			continue // mutation never denies: the validating webhook says why
		}
		if m := r.message(); r.review.Response.Allowed || len(m) > 4096+32 || !strings.Contains(m, "names no known role") || !strings.Contains(m, "bytes)") {
			t.Fatalf("want the denial clipped to 4 KiB and still saying why, got %d bytes: %.200s…", len(m), m)
		}
	}
	// A uid is echoed whole or not at all: a forged 1 MiB one is refused.
	r := s.post("/validate", review("x-"+huge, "alice", "CREATE", node("edge-1", nil, services(1))))
	if r.status != 400 || r.review.Response.UID != "" || !strings.Contains(r.message(), "uid is") || len(r.raw) > 4<<10 {
		t.Fatalf("a 1 MiB uid: want 400 without it, got HTTP %d, %d bytes: %.300s", r.status, len(r.raw), r.raw)
	}
	longest := 0
	for line := range strings.SplitSeq(s.proc.Logs(), "\n") {
		longest = max(longest, len(line))
	}
	if longest > 16<<10 {
		t.Fatalf("the longest log line is %d bytes; caller strings must be clipped", longest)
	}
	s.normalStillWorks()
	st := s.memory()
	t.Logf("after 50 reviews of 2 MiB caller strings: RSS %.1f MiB, peak %.1f MiB, longest log line %d bytes", mib(st.RSS), mib(st.HWM), longest)
}

// TestLargeObjectsAreBounded is finding 3: a schema-valid QuantumNode with
// 100,000 services peaked at 204 MiB. Beyond the element budget a review
// is refused before decoding; the largest object the CRD admits, eight at
// once, stays under the memory bound.
func TestLargeObjectsAreBounded(t *testing.T) {
	s := start(t)
	big := review("big", "alice", "CREATE", node("edge-1", nil, shortServices(100_000)))
	for _, path := range []string{"/mutate", "/validate"} {
		r := s.post(path, big)
		if r.status != 413 || r.code() != 413 || !strings.Contains(r.message(), "JSON elements") {
			t.Fatalf("%s: want 413 naming the element budget for %d KiB of services, got HTTP %d %.300s", path, len(big)>>10, r.status, r.raw)
		}
	}
	worst := review("worst", "alice", "CREATE", node("edge-1", nil, services(256)))
	for round := range 5 {
		paths := func(i int) string { return [...]string{"/validate", "/mutate"}[i%2] }
		for _, r := range s.postConcurrently(8, paths, worst) {
			if r.status != 200 || !r.review.Response.Allowed {
				t.Errorf("round %d: the largest valid QuantumNode is admitted, got HTTP %d %.300s", round, r.status, r.raw)
			}
		}
	}
	s.normalStillWorks()
	st := s.memory()
	t.Logf("5 rounds of 8 concurrent 256-service reviews (%d KiB each): RSS %.1f MiB, peak %.1f MiB", len(worst)>>10, mib(st.RSS), mib(st.HWM))
}

// TestOverloadGetsA429 holds more reviews than the server evaluates at
// once: each gets an answer (admitted or a clear 429), none a dropped
// connection, and memory stays bounded.
func TestOverloadGetsA429(t *testing.T) {
	s := start(t)
	body := review("load", "alice", "CREATE", node("edge-1", nil, services(256)))
	answers := map[int32]int{}
	for _, r := range s.postConcurrently(64, func(int) string { return "/validate" }, body) {
		if r.code() == 429 && !strings.Contains(r.message(), "overloaded") {
			t.Errorf("a 429 says the server is overloaded, got %q", r.message())
		}
		answers[r.code()]++
	}
	for code := range answers {
		if code != 200 && code != 429 {
			t.Fatalf("64 concurrent reviews: want only 200 and 429, got %v", answers)
		}
	}
	s.normalStillWorks()
	st := s.memory()
	t.Logf("64 concurrent 256-service reviews: answers by code %v; RSS %.1f MiB, peak %.1f MiB", answers, mib(st.RSS), mib(st.HWM))
}

// TestSlowConnectionsDoNotStarveProbesOrReviews opens hundreds of
// connections that send half a request and stall: probes, readiness and a
// normal review still answer promptly.
func TestSlowConnectionsDoNotStarveProbesOrReviews(t *testing.T) {
	s := start(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 400 {
		c, err := net.DialTimeout("tcp", s.proc.Address, 5*time.Second)
		if err != nil {
			t.Fatalf("open a slow connection: %v", err)
		}
		// Half a TLS hello: the server waits for the rest.
		_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01})
		conns = append(conns, c)
	}
	startAt := time.Now()
	if code, body := s.probe("/readyz?verbose"); code != 200 {
		t.Fatalf("readiness with 400 stalled connections: HTTP %d\n%s", code, body)
	}
	if code, _ := s.probe("/healthz"); code != 200 {
		t.Fatalf("liveness with 400 stalled connections: HTTP %d", code)
	}
	s.normalStillWorks()
	if took := time.Since(startAt); took > 5*time.Second {
		t.Fatalf("probes and a review took %s with stalled connections open", took)
	}
	s.memory()
}

// TestSchemalessValuesInMessagesAreClipped: without the CRD's schema (an
// old CRD, a crafted review) a service name can be a megabyte; the deny
// message that quotes it is clipped.
func TestSchemalessValuesInMessagesAreClipped(t *testing.T) {
	s := start(t)
	svcs := []any{map[string]any{"name": strings.Repeat("N", 1<<20), "port": 80}, map[string]any{"name": strings.Repeat("N", 1<<20), "port": 80}}
	r := s.post("/validate", review("schemaless", "alice", "CREATE", node("edge-1", nil, svcs)))
	if r.status != 200 || r.review.Response.Allowed || len(r.message()) > 4096+32 || !strings.Contains(r.message(), "bytes)") {
		t.Fatalf("want a clipped denial, got HTTP %d with a %d-byte message", r.status, len(r.message()))
	}
	s.normalStillWorks()
	s.memory()
}

// TestHugeHeadersAreRefused: headers beyond 64 KiB (Go's default is 1 MiB)
// get 431 without being read in full, and the next request is served.
func TestHugeHeadersAreRefused(t *testing.T) {
	s := start(t)
	req, err := http.NewRequest(http.MethodPost, s.proc.URL("/validate"), bytes.NewReader(review("h", "alice", "CREATE", node("edge-1", nil, services(1)))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Pad", strings.Repeat("p", 200<<10))
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("a 200 KiB header: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 200 KiB header: want 431, got %d", resp.StatusCode)
	}
	s.normalStillWorks()
	s.memory()
}
