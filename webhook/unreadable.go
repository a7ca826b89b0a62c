package webhook

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/internal/clip"
	"github.com/quantumnode/qn-admission/policies"
)

// net/http refuses some requests before any handler runs: two
// Transfer-Encoding headers or a coding other than chunked (501), a header
// line that is not one, Content-Length headers that disagree (400),
// headers over MaxHeaderBytes (431). It answers them in plain text on the
// connection itself, which the apiserver cannot read as a review. The
// admission listener's connections are wrapped (answeringConn) so that
// such an answer leaves as an AdmissionReview with net/http's status and a
// message saying what was wrong, read from the request's own headers.

// headSample is how much of what a connection read since its last answer
// is kept to say what was wrong with a refused request's headers: the
// apiserver's headers fit in it many times over.
const headSample = 2 << 10

// answeringListener wraps each TLS connection of ln in an answeringConn.
type answeringListener struct {
	net.Listener
	errorLog *log.Logger
}

func (l *answeringListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return c, nil
	}
	return &answeringConn{Conn: tc, errorLog: l.errorLog}, nil
}

// answeringConn is a server TLS connection whose plain-text refusals by
// net/http are rewritten as AdmissionReviews. net/http serves it as any
// connection (it is no *tls.Conn), so the handshake happens here, at the
// first read, and its failure is logged as net/http logs it.
type answeringConn struct {
	*tls.Conn
	errorLog *log.Logger
	// Only net/http's reads touch these, one at a time.
	handshook bool
	head      []byte
}

func (c *answeringConn) Read(p []byte) (int, error) {
	if !c.handshook {
		c.handshook = true
		if err := c.Conn.Handshake(); err != nil {
			if c.errorLog != nil {
				c.errorLog.Printf("http: TLS handshake error from %s: %v", c.RemoteAddr(), err)
			}
			return 0, err
		}
	}
	n, err := c.Conn.Read(p)
	if room := headSample - len(c.head); room > 0 && n > 0 {
		if c.head == nil {
			c.head = make([]byte, 0, headSample)
		}
		c.head = append(c.head, p[:min(n, room)]...)
	}
	return n, err
}

// Write passes answers through, and turns net/http's plain-text refusal
// of a request it could not read into an AdmissionReview. Such a refusal
// is one write of its own, and the handler never answers in plain text.
func (c *answeringConn) Write(p []byte) (int, error) {
	if answer, ok := reviewForRefusal(p, c.head); ok {
		if _, err := c.Conn.Write(answer); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	// An answer: what is read next is the next request.
	c.head = c.head[:0]
	return c.Conn.Write(p)
}

// plainRefusal is how net/http's refusals begin and what follows their
// status line (net/http's server.go, errorHeaders).
const (
	plainRefusal        = "HTTP/1.1 "
	plainRefusalHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
)

// reviewForRefusal rewrites one of net/http's plain-text refusals (p) as
// an HTTP answer carrying an AdmissionReview; head is what the connection
// read of the refused request.
func reviewForRefusal(p, head []byte) ([]byte, bool) {
	if !bytes.HasPrefix(p, []byte(plainRefusal)) {
		return nil, false
	}
	statusLine, text, ok := bytes.Cut(p[len(plainRefusal):], []byte(plainRefusalHeaders))
	if !ok || len(statusLine) < 3 {
		return nil, false
	}
	code, err := strconv.Atoi(string(statusLine[:3]))
	if err != nil || code < 400 {
		return nil, false
	}
	d := policies.Deny(int32(code), refusalReason(code), refusalMessage(code, string(text), head))
	rev := review("", d, policies.PathValidate)
	body, ok := appendReview(nil, rev)
	if !ok {
		var err error
		if body, err = json.Marshal(rev); err != nil {
			return nil, false
		}
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n", code, http.StatusText(code), len(body))
	out.Write(body)
	return out.Bytes(), true
}

func refusalReason(code int) metav1.StatusReason {
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		return metav1.StatusReasonRequestEntityTooLarge
	case http.StatusNotImplemented:
		return metav1.StatusReasonBadRequest
	}
	return reasonFor(code)
}

// refusalMessage says what net/http found wrong, from its text and the
// request's headers.
func refusalMessage(code int, text string, head []byte) string {
	const apiserver = "send a review as the apiserver does: HTTP/1.1, one Content-Length or one `Transfer-Encoding: chunked`"
	h := sampleHeaders(head)
	switch code {
	case http.StatusNotImplemented:
		te := h["transfer-encoding"]
		switch {
		case len(te) > 1:
			return fmt.Sprintf("the request was not read: it has %d Transfer-Encoding headers (%s), and only one, chunked, can frame a body; %s", len(te), quoted(te), apiserver)
		case len(te) == 1:
			return fmt.Sprintf("the request was not read: its Transfer-Encoding %s is not supported, only chunked is; %s", quoted(te), apiserver)
		}
		return "the request was not read: its Transfer-Encoding is not supported (only one header, chunked, is); " + apiserver
	case http.StatusRequestHeaderFieldsTooLarge:
		return fmt.Sprintf("the request was not read: its headers exceed %d bytes; %s", MaxHeaderBytes, apiserver)
	}
	if cl := h["content-length"]; len(cl) > 1 {
		return fmt.Sprintf("the request was not read: it has %d Content-Length headers (%s) that disagree; %s", len(cl), quoted(cl), apiserver)
	}
	if bad := h[malformedLine]; len(bad) > 0 {
		return fmt.Sprintf("the request was not read: its headers hold a line that is not `Name: value` (%s); %s", quoted(bad[:1]), apiserver)
	}
	// net/http's own words, such as "missing required Host header".
	return fmt.Sprintf("the request was not read: net/http refused its headers (%s); %s", clip.String(strings.TrimSpace(text), clip.FieldBytes), apiserver)
}

// malformedLine keys, in sampleHeaders' answer, the header lines that are
// not "Name: value".
const malformedLine = ""

// sampleHeaders parses the header block at the start of head, as far as it
// goes: values by lower-cased name, in order.
func sampleHeaders(head []byte) map[string][]string {
	h := map[string][]string{}
	block, _, _ := bytes.Cut(head, []byte("\r\n\r\n"))
	lines := strings.Split(string(block), "\r\n")
	for _, line := range lines[min(1, len(lines)):] { // the request line first
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			h[malformedLine] = append(h[malformedLine], line)
			continue
		}
		name = strings.ToLower(name)
		h[name] = append(h[name], strings.TrimSpace(value))
	}
	return h
}

// quoted lists caller-sent values, clipped.
func quoted(values []string) string {
	q := make([]string, 0, len(values))
	for _, v := range clip.Strings(values, clip.ListItems, clip.FieldBytes) {
		q = append(q, strconv.Quote(v))
	}
	return strings.Join(q, ", ")
}
