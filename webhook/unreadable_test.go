package webhook

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// TestNetHTTPRefusalsBecomeReviews: each plain-text refusal net/http
// writes (its server.go, byte for byte) becomes an HTTP answer of the same
// status carrying an AdmissionReview that says what was wrong, read from
// the request's headers when they tell; anything else passes untouched.
func TestNetHTTPRefusalsBecomeReviews(t *testing.T) {
	const post = "POST /validate HTTP/1.1\r\nHost: qn\r\nContent-Type: application/json\r\n"
	cases := map[string]struct {
		refusal, head string
		status        int
		want          string
	}{
		"headers over MaxHeaderBytes": {
			refusal: "HTTP/1.1 431 Request Header Fields Too Large" + plainRefusalHeaders + "431 Request Header Fields Too Large",
			head:    post + "X-Pad: ppppp", status: 431, want: "its headers exceed 65536 bytes",
		},
		"a request without Host (net/http's own words)": {
			refusal: "HTTP/1.1 400 Bad Request: missing required Host header" + plainRefusalHeaders + "400 Bad Request: missing required Host header",
			head:    "POST /validate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", status: 400, want: "net/http refused its headers (400 Bad Request: missing required Host header)",
		},
		"a Transfer-Encoding the sample did not hold": {
			refusal: "HTTP/1.1 501 Not Implemented" + plainRefusalHeaders + "Unsupported transfer encoding",
			status:  501, want: "its Transfer-Encoding is not supported (only one header, chunked, is)",
		},
		"two Transfer-Encoding headers": {
			refusal: "HTTP/1.1 501 Not Implemented" + plainRefusalHeaders + "Unsupported transfer encoding",
			head:    post + "Transfer-Encoding: chunked\r\ntransfer-encoding: gzip\r\n\r\n", status: 501, want: `2 Transfer-Encoding headers ("chunked", "gzip")`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out, ok := reviewForRefusal([]byte(tc.refusal), []byte(tc.head))
			if !ok {
				t.Fatal("not rewritten")
			}
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
			if err != nil {
				t.Fatal(err)
			}
			var rev admissionv1.AdmissionReview
			if err := json.NewDecoder(resp.Body).Decode(&rev); err != nil || rev.Response == nil || rev.Response.Result == nil {
				t.Fatalf("not an AdmissionReview (%v): %s", err, out)
			}
			if resp.StatusCode != tc.status || rev.Response.Result.Code != int32(tc.status) || rev.Response.Allowed ||
				resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(rev.Response.Result.Message, tc.want) {
				t.Fatalf("want HTTP %d saying %q, got:\n%s", tc.status, tc.want, out)
			}
		})
	}
	for name, p := range map[string]string{
		"an answer of the handler": "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"part of a body":           "HTTP/1.1 is how the body begins",
		"a 1xx":                    "HTTP/1.1 100 Continue\r\n\r\n",
	} {
		if _, ok := reviewForRefusal([]byte(p), nil); ok {
			t.Errorf("%s was rewritten", name)
		}
	}
}
