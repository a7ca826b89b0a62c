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
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

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

// readReviewBody checks the Content-Type and reads the body, bounded.
func readReviewBody(r *http.Request, maxBytes int64) ([]byte, *requestError) {
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		return nil, &requestError{status: http.StatusUnsupportedMediaType,
			message: fmt.Sprintf("Content-Type %q is not supported; send application/json", clip.String(ct, clip.FieldBytes))}
	}
	if r.ContentLength > maxBytes {
		return nil, tooLarge(maxBytes)
	}
	var body []byte
	var err error
	read := 0
	if n := r.ContentLength; n > 0 {
		// The apiserver always sends a length: one exact allocation instead
		// of ReadAll's doubling, which would hold up to twice the body.
		body = make([]byte, n)
		read, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxBytes+1))
		read = len(body)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, badRequest("", "the request body stalled: %d of %s bytes arrived before the body deadline; the apiserver sends a review at once", read, lengthOf(r))
	}
	if err != nil {
		return nil, badRequest("", "read request body: %v", err)
	}
	if int64(len(body)) > maxBytes {
		return nil, tooLarge(maxBytes)
	}
	return body, nil
}

// decodeBody applies the envelope rules to a body already read: the element
// budget first (a scan that allocates nothing), then strict decoding, the
// objects' values holding what reads reads (nil: everything).
func decodeBody(body []byte, maxElements int, reads *policies.ObjectReads) (*admissionv1.AdmissionReview, *decodedObjects, *requestError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil, badRequest("", "request body is empty; send an admission.k8s.io/v1 AdmissionReview")
	}
	if err := checkBudget(body, maxElements); err != nil {
		return nil, nil, &requestError{status: http.StatusRequestEntityTooLarge, message: err.Error()}
	}
	review, objs, ok := decodeReviewOnePass(body, reads)
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
