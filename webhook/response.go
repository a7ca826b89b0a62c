package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quantumnode/qn-admission/internal/clip"
	"github.com/quantumnode/qn-admission/policies"
)

// review wraps a response in the AdmissionReview envelope the apiserver
// expects: apiVersion, kind and the request's uid always echoed.
func review(uid types.UID, d policies.Decision, path policies.Path) *admissionv1.AdmissionReview {
	// Messages may quote the object (a service name, a role annotation):
	// clipped, so a caller cannot size our answer.
	resp := &admissionv1.AdmissionResponse{
		UID:      uid,
		Allowed:  d.Allowed,
		Warnings: clip.Strings(d.Warnings, clip.ListItems, clip.MessageBytes),
		Result: &metav1.Status{
			Code:    d.Code,
			Reason:  d.Reason,
			Message: clip.Middle(d.Message, clip.AnswerBytes),
		},
	}
	if !d.Allowed {
		resp.Result.Status = metav1.StatusFailure
	} else {
		resp.Result.Status = metav1.StatusSuccess
	}
	// The apiserver turns retryAfterSeconds into a Retry-After header, so
	// a client knows when the rate window has room again.
	if d.RetryAfter > 0 {
		resp.Result.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfterSeconds(d.RetryAfter)}
	}
	resp.AuditAnnotations = auditAnnotations(d)
	// Only an admitted mutation carries a patch; a validating webhook that
	// sent one would make the apiserver reject the response.
	if path == policies.PathMutate && d.Allowed && len(d.Patch) > 0 {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch = d.Patch
		resp.PatchType = &pt
	}
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: reviewAPIVersion, Kind: reviewKind},
		Response: resp,
	}
}

// retryAfterSeconds rounds up, and is at least 1: a client told 0 would
// retry at once into the same full window.
func retryAfterSeconds(d time.Duration) int32 {
	s := int32((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// auditAnnotations put the decision in the apiserver's audit log (prefixed
// there with the webhook's name): who judged, with which policy revision,
// what it decided, and the requester's window after the request.
func auditAnnotations(d policies.Decision) map[string]string {
	if d.Revision == "" {
		return nil // refused before the engine ran: a malformed request
	}
	a := map[string]string{"revision": d.Revision, "decision": outcome(d)}
	// The role may be any annotation value a caller wrote and the exemption
	// names the user: clipped as in the decision log, so the API server's
	// audit log does not carry a caller-sized value per request.
	if d.Role != "" {
		a["role"] = field(d.Role)
	}
	if d.Exempt != "" {
		a["exempt"] = field(d.Exempt)
	}
	if w := d.Window; w != nil {
		a["window"] = fmt.Sprintf("%d/%d per %gs by %s", w.Count, w.Limit, w.PeriodSeconds, w.Key)
	}
	return a
}

// outcome names a decision for logs, metrics and audit annotations.
func outcome(d policies.Decision) string {
	switch {
	// An answer from the role's onError is an error even when it admits:
	// the policies did not decide it.
	case d.Code >= 500 || d.PolicyFailed:
		return "error"
	case !d.Allowed:
		return "denied"
	}
	return "allowed"
}

// writeReview sends rev with an HTTP status. The apiserver reads a decision
// only from a 200; other statuses are for requests that were not reviews.
func writeReview(w http.ResponseWriter, status int, rev *admissionv1.AdmissionReview) error {
	buf := answerBuffers.Get().(*[]byte)
	encoded, ok := appendReview((*buf)[:0], rev)
	body := encoded
	var err error
	if !ok {
		body, err = json.Marshal(rev)
	}
	if err != nil {
		// Cannot happen with these types; answer something well-formed anyway.
		body = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"","allowed":false,"status":{"code":500,"message":"encode response failed"}}}`)
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, err = w.Write(body)
	if cap(encoded) <= maxPooledAnswerBytes {
		*buf = encoded[:0]
		answerBuffers.Put(buf)
	}
	return err
}

const maxPooledAnswerBytes = 64 << 10

// answerBuffers hold answers' bytes between requests: Write copies them
// into the connection's buffer (or sends them) before it returns. A
// buffer that grew past 64 KiB for a large answer is not kept.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// jsonContentType is every answer's Content-Type value, shared: header
// values are read, never written, and net/http copies them when the
// header is written.
var jsonContentType = []string{"application/json"}

// flushAnswer sends a written answer at once over HTTP/1, where its
// Content-Length lets the caller read it whole: the decision line and
// metrics that follow do not delay it, and the request ends
// (HandlerOptions.Activity) only once its answer is on its way, so work
// that waits for that moment (the shadow) does not compete with the
// answer's encryption and write. Over HTTP/2 the stream ends only when the
// handler returns, so a flush would cost one more frame and gain nothing.
func flushAnswer(r *http.Request, w http.ResponseWriter) error {
	if r.ProtoMajor == 1 {
		return http.NewResponseController(w).Flush()
	}
	return nil
}

// writeRequestError answers a request we refused before any policy ran.
// With a uid the review is well-formed and the apiserver shows our message
// (HTTP 200 with a denial); without one it cannot be a real apiserver
// request and gets the transport status.
func writeRequestError(w http.ResponseWriter, e *requestError) error {
	d := policies.Deny(int32(e.status), reasonFor(e.status), e.message)
	status := e.status
	if e.uid != "" && e.status == http.StatusBadRequest {
		status = http.StatusOK
	}
	return writeReview(w, status, review(e.uid, d, policies.PathValidate))
}

func reasonFor(status int) metav1.StatusReason {
	switch status {
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	case http.StatusRequestEntityTooLarge:
		return metav1.StatusReasonRequestEntityTooLarge
	case http.StatusUnsupportedMediaType:
		return metav1.StatusReasonUnsupportedMediaType
	case http.StatusMethodNotAllowed:
		return metav1.StatusReasonMethodNotAllowed
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	default:
		return metav1.StatusReasonInternalError
	}
}
