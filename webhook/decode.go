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
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
)

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

// decodeReview reads and decodes an admission/v1 AdmissionReview from r:
// bounded, case-sensitive, duplicate keys refused.
func decodeReview(r *http.Request, maxBytes int64) (*admissionv1.AdmissionReview, *requestError) {
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		return nil, &requestError{status: http.StatusUnsupportedMediaType,
			message: fmt.Sprintf("Content-Type %q is not supported; send application/json", ct)}
	}
	if r.ContentLength > maxBytes {
		return nil, tooLarge(maxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBytes+1))
	if err != nil {
		return nil, badRequest("", "read request body: %v", err)
	}
	if int64(len(body)) > maxBytes {
		return nil, tooLarge(maxBytes)
	}
	return decodeBody(body)
}

// decodeBody applies the envelope rules to a body already read.
func decodeBody(body []byte) (*admissionv1.AdmissionReview, *requestError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("", "request body is empty; send an admission.k8s.io/v1 AdmissionReview")
	}
	review := &admissionv1.AdmissionReview{}
	strictErrs, err := kjson.UnmarshalStrict(body, review, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, badRequest(uidOf(review), "request body is not an AdmissionReview: %s", describeJSONError(err))
	}
	if len(strictErrs) > 0 {
		return nil, badRequest(uidOf(review), "request body is ambiguous: %s", joinErrors(strictErrs))
	}
	uid := uidOf(review)
	if review.APIVersion != reviewAPIVersion || review.Kind != reviewKind {
		return nil, badRequest(uid, "expected apiVersion %q and kind %q, got apiVersion %q and kind %q",
			reviewAPIVersion, reviewKind, review.APIVersion, review.Kind)
	}
	if review.Request == nil {
		return nil, badRequest("", "AdmissionReview has no request")
	}
	if review.Request.UID == "" {
		return nil, badRequest("", "AdmissionReview request has no uid")
	}
	return review, nil
}

func tooLarge(maxBytes int64) *requestError {
	return &requestError{status: http.StatusRequestEntityTooLarge,
		message: fmt.Sprintf("request body exceeds %d bytes; an AdmissionReview is at most %d MiB", maxBytes, maxBytes>>20)}
}

func uidOf(review *admissionv1.AdmissionReview) types.UID {
	if review == nil || review.Request == nil {
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
