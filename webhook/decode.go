// Package webhook is the HTTP side of qn-admission: it decodes
// AdmissionReviews the way the kube-apiserver encodes them, extracts the
// request context, asks a Decider, and answers with a well-formed
// AdmissionReview in every case. It holds no policy logic.
package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/internal/clip"
	"github.com/quantumnode/qn-admission/policies"
)

// DefaultMaxRequestElements caps the JSON elements (object members and array
// items, envelope included) of one AdmissionReview. The largest QuantumNode
// the CRD admits, updated, with its managed fields, has a few thousand; a
// crafted body with hundreds of thousands would cost hundreds of MiB once
// decoded and turned into Rego input.
const DefaultMaxRequestElements = 20000

// MaxRequestDepth caps how deeply a body's objects and arrays nest; a
// QuantumNode nests about ten levels.
const MaxRequestDepth = 100

// DefaultMaxRequestBytes caps an AdmissionReview body. The apiserver limits
// objects to 3 MiB; a review carries object and oldObject plus the envelope.
const DefaultMaxRequestBytes = 7 << 20

const (
	reviewAPIVersion = "admission.k8s.io/v1"
	reviewKind       = "AdmissionReview"
)

// requestError is a request we refuse before any policy runs. uid is set
// when the review got far enough to carry one.
type requestError struct {
	status  int
	uid     types.UID
	message string
}

func (e *requestError) Error() string { return e.message }

func badRequest(uid types.UID, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, uid: uid, message: fmt.Sprintf(format, args...)}
}

// bodyPace is how a body must keep arriving once its headers are read: by
// the body deadline at the latest, and, with a rate, at least rate bytes a
// second on average after a grace of a second. The room a request holds
// under the request bytes in flight is reserved for its declared length
// before a byte is read (reserving as bytes arrive lets a burst of large
// reviews each hold part of the room and wait for the rest, so none
// finishes); the pace bounds how long a sender that declares a large body
// and trickles it, or sends nothing, holds that room: about a second,
// where the body deadline alone let it hold the room for its whole length.
// The apiserver sends a review at once, far faster.
type bodyPace struct {
	start    time.Time
	deadline time.Time // the body deadline
	rate     int64     // bytes a second; 0: the body deadline alone
	// set moves the connection's read deadline; current is where it is.
	set     func(time.Time) error
	current time.Time
}

// bodyRateGrace is how long the first bytes of a body may take.
const bodyRateGrace = time.Second

// bodyPaceSlack is how far past the rate's due time a read deadline is
// set, so that it moves once per that much of a body rather than before
// every read (over HTTP/2 a move is a message to the connection's
// goroutine). A review that arrives in its first reads never moves it.
const bodyPaceSlack = 250 * time.Millisecond

// first is the read deadline to set before a byte of the body is read.
func (p *bodyPace) first() time.Time {
	p.current = p.deadline
	if p.rate > 0 && p.start.Add(bodyRateGrace).Before(p.deadline) {
		p.current = p.start.Add(bodyRateGrace)
	}
	return p.current
}

// expect moves the read deadline, if it must, to when at the pace's rate
// one more byte than received should have come.
func (p *bodyPace) expect(received int64) {
	if p == nil || p.set == nil || p.rate <= 0 || !p.current.Before(p.deadline) {
		return
	}
	due := p.start.Add(bodyRateGrace + time.Duration(float64(received+1)/float64(p.rate)*float64(time.Second)))
	if !due.After(p.current) {
		return
	}
	p.current = due.Add(bodyPaceSlack)
	if p.current.After(p.deadline) {
		p.current = p.deadline
	}
	_ = p.set(p.current)
}

// readReviewBody checks the Content-Type and reads the body, bounded, at
// pace's rate at least. A body longer than bodyProofBytes (or of unknown
// length) is read that far into pooled room first; then prove is called
// to reserve the rest of the room, and the body continues in room of its
// whole length. A body of declared length is read into pooled room when
// one fits: the caller releases it once nothing reads the request's bytes
// any more (bodypool.go).
func readReviewBody(r *http.Request, maxBytes int64, pace *bodyPace, prove func() *requestError) ([]byte, *pooledBody, *requestError) {
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		return nil, nil, &requestError{status: http.StatusUnsupportedMediaType,
			message: fmt.Sprintf("Content-Type %q is not supported; send application/json", clip.String(ct, clip.FieldBytes))}
	}
	if r.ContentLength > maxBytes {
		return nil, nil, tooLarge(maxBytes)
	}
	// want is what to read: the declared length (the apiserver always
	// sends one: one exact allocation instead of doubling, which would
	// hold up to twice the body), or up to one byte past the limit, to
	// tell a body that is too large.
	want, size := maxBytes+1, int64(512)
	if n := r.ContentLength; n >= 0 {
		want, size = n, n
	}
	// proving: the body is longer than its proof, which is read first.
	proving := want > bodyProofBytes
	var pooled *pooledBody
	switch {
	case proving:
		pooled = takeBody(bodyProofBytes)
	case r.ContentLength >= 0:
		pooled = takeBody(r.ContentLength)
	}
	var body []byte
	if pooled != nil {
		body = pooled.buf
	} else {
		body = make([]byte, 0, size)
	}
	// fail gives the room back with the error: nothing read it yet.
	fail := func(e *requestError) ([]byte, *pooledBody, *requestError) {
		pooled.release()
		return nil, nil, e
	}
	for int64(len(body)) < want {
		if proving && len(body) == bodyProofBytes {
			// The proof arrived: reserve the rest and move to room of
			// the whole length.
			proving = false
			if e := prove(); e != nil {
				return fail(e)
			}
			proof := pooled
			pooled = nil
			if r.ContentLength >= 0 {
				pooled = takeBody(r.ContentLength)
			}
			if pooled != nil {
				body = append(pooled.buf, body...)
			} else {
				body = append(make([]byte, 0, max(size, 2*bodyProofBytes)), body...)
			}
			proof.release()
		}
		if len(body) == cap(body) {
			body = slices.Grow(body, int(min(int64(cap(body)), want-int64(len(body)))))
		}
		pace.expect(int64(len(body)))
		limit := min(int64(cap(body)), want)
		if proving {
			limit = bodyProofBytes
		}
		room := body[len(body):limit]
		n, err := r.Body.Read(room)
		body = body[:len(body)+n]
		if err == io.EOF {
			if r.ContentLength > 0 && int64(len(body)) < r.ContentLength {
				err = io.ErrUnexpectedEOF
			} else {
				break
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fail(badRequest("", "the request body stalled: %d of %s bytes arrived in %s; a body must arrive %s; the apiserver sends a review at once",
				len(body), lengthOf(r), time.Since(pace.startTime()).Round(time.Millisecond), pace.rule()))
		}
		if err != nil {
			return fail(badRequest("", "read request body: %v", err))
		}
	}
	if int64(len(body)) > maxBytes {
		return fail(tooLarge(maxBytes))
	}
	if pooled != nil {
		pooled.buf = body
	}
	return body, pooled, nil
}

// pause moves the pace's clock on by d, time the body was not read for
// (waiting for room), and the read deadline with it.
func (p *bodyPace) pause(d time.Duration) {
	if p == nil || d <= 0 {
		return
	}
	p.start = p.start.Add(d)
	p.deadline = p.deadline.Add(d)
	p.current = p.current.Add(d)
	if p.set != nil {
		_ = p.set(p.current)
	}
}

func (p *bodyPace) startTime() time.Time {
	if p == nil {
		return time.Now()
	}
	return p.start
}

// rule says the pace in words, for the stalled body's message.
func (p *bodyPace) rule() string {
	if p == nil {
		return "at once"
	}
	within := fmt.Sprintf("within %s of its headers", p.deadline.Sub(p.start).Round(time.Millisecond))
	if p.rate <= 0 {
		return within
	}
	return fmt.Sprintf("%s, at %d KiB/s at least after its first %s", within, p.rate>>10, bodyRateGrace)
}

// decodeBody applies the envelope rules to a body already read: the
// element and depth budget before anything is built, then strict
// decoding, the objects' values holding what d may read of them for the
// request's kind (a nil d: everything).
//
// The budget costs a scan of its own (checkBudget) only where the
// one-pass decoder does not keep it: a body of n bytes holds at most n
// elements (each is counted at a '{', '[' or ',' of its own), so one no
// longer than maxElements cannot exceed them, and the one-pass decoder
// refuses nesting past MaxRequestDepth as it reads. A body it does not
// take is scanned before the strict decoder, which nests deeper, sees it;
// so a body past either bound gets checkBudget's answer on every path.
func decodeBody(body []byte, maxElements int, d Decider) (*admissionv1.AdmissionReview, *decodedObjects, *requestError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil, badRequest("", "request body is empty; send an admission.k8s.io/v1 AdmissionReview")
	}
	overBudget := func() *requestError {
		if err := checkBudget(body, maxElements); err != nil {
			return &requestError{status: http.StatusRequestEntityTooLarge, message: err.Error()}
		}
		return nil
	}
	scanned := len(body) > maxElements
	if scanned {
		if e := overBudget(); e != nil {
			return nil, nil, e
		}
	}
	review, objs, ok := decodeReviewOnePass(body, objectReadsForBody(d, body))
	if !ok && !scanned {
		if e := overBudget(); e != nil {
			return nil, nil, e
		}
	}
	if !ok {
		// Anything the one-pass decoder does not take gets the strict
		// decoder's answer, which names what is wrong.
		review, objs = &admissionv1.AdmissionReview{}, nil
		strictErrs, err := kjson.UnmarshalStrict(body, review, kjson.DisallowDuplicateFields)
		if err != nil {
			return nil, nil, badRequest(uidOf(review), "request body is not an AdmissionReview: %s", describeJSONError(err))
		}
		if len(strictErrs) > 0 {
			return nil, nil, badRequest(uidOf(review), "request body is ambiguous: %s", joinErrors(strictErrs))
		}
	}
	uid := uidOf(review)
	if review.APIVersion != reviewAPIVersion || review.Kind != reviewKind {
		return nil, nil, badRequest(uid, "expected apiVersion %q and kind %q, got apiVersion %q and kind %q",
			reviewAPIVersion, reviewKind, clip.String(review.APIVersion, clip.FieldBytes), clip.String(review.Kind, clip.FieldBytes))
	}
	if review.Request == nil {
		return nil, nil, badRequest("", "AdmissionReview has no request")
	}
	if review.Request.UID == "" {
		return nil, nil, badRequest("", "AdmissionReview request has no uid")
	}
	if n := len(review.Request.UID); n > maxUIDBytes {
		return nil, nil, badRequest("", "AdmissionReview request uid is %d bytes; the API server sends a UUID (at most %d bytes accepted)", n, maxUIDBytes)
	}
	return review, objs, nil
}

// lengthOf is the declared body length for messages.
func lengthOf(r *http.Request) string {
	if r.ContentLength < 0 {
		return "an undeclared number of"
	}
	return strconv.FormatInt(r.ContentLength, 10)
}

func tooLarge(maxBytes int64) *requestError {
	return &requestError{status: http.StatusRequestEntityTooLarge,
		message: fmt.Sprintf("request body exceeds %d bytes; an AdmissionReview is at most %d MiB", maxBytes, maxBytes>>20)}
}

// maxUIDBytes bounds the request uid we echo: the API server's are
// 36-character UUIDs; a longer one is a forgery and is not echoed.
const maxUIDBytes = 128

// uidOf is the uid to echo in an answer: "" when absent or too long.
func uidOf(review *admissionv1.AdmissionReview) types.UID {
	if review == nil || review.Request == nil || len(review.Request.UID) > maxUIDBytes {
		return ""
	}
	return review.Request.UID
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// describeJSONError keeps the decoder's explanation (offset, field, type)
// and drops Go type names a user cannot act on.
func describeJSONError(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "json: ")
	msg = strings.ReplaceAll(msg, "Go struct field ", "field ")
	msg = strings.ReplaceAll(msg, "Go value of type ", "")
	return msg
}

func joinErrors(errs []error) string {
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, strings.TrimPrefix(e.Error(), "json: "))
	}
	return strings.Join(msgs, "; ")
}

var errNotObject = errors.New("is not a JSON object")

// objectReadsForBody is what d may read of the objects of the review in
// body: for its request.kind, found ahead of decoding (the apiserver
// writes it before the objects), and for any kind when the body names
// none the decoding would accept.
func objectReadsForBody(d Decider, body []byte) *policies.ObjectReads {
	if d == nil {
		return nil
	}
	if k, ok := kindsByBytes.gvk(astjson.Find(body, MaxRequestDepth, "request", "kind")); ok {
		return d.ObjectReadsForKind(policies.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: k.Kind})
	}
	return d.ObjectReads()
}
