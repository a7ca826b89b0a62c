package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/quantumnode/qn-admission/internal/activity"
	"github.com/quantumnode/qn-admission/internal/clip"
	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/internal/tracing"
	"github.com/quantumnode/qn-admission/policies"
)

// Decider answers admission requests. *policies.Engine is the real one.
type Decider interface {
	Validate(ctx context.Context, in *policies.Input) policies.Decision
	Mutate(ctx context.Context, in *policies.Input) policies.Decision
	// ObjectReads is what it may read of any request's objects as Rego
	// values; the webhook decodes only that into values (nil: the objects
	// whole).
	ObjectReads() *policies.ObjectReads
	// ObjectReadsForKind is ObjectReads for requests of kind k, which may
	// be less (a Pod's spec, for policies whose rules on spec are
	// QuantumNode rules).
	ObjectReadsForKind(k policies.GroupVersionKind) *policies.ObjectReads
	// Current is the policy set whose role table names the roles of the
	// metrics' role label; nil for a Decider that judges by none.
	Current() *policies.Set
}

// WholeObjects is a Decider's answers for one that reads the objects
// whole and judges by no policy set: embed it and write Validate and
// Mutate.
type WholeObjects struct{}

// ObjectReads implements Decider: the objects whole.
func (WholeObjects) ObjectReads() *policies.ObjectReads { return nil }

// ObjectReadsForKind implements Decider: the objects whole.
func (WholeObjects) ObjectReadsForKind(policies.GroupVersionKind) *policies.ObjectReads { return nil }

// Current implements Decider: no policy set.
func (WholeObjects) Current() *policies.Set { return nil }

// HandlerOptions configure the admission HTTP handler.
type HandlerOptions struct {
	// MaxRequestBytes caps a request body (413 above). Default 7 MiB.
	MaxRequestBytes int64
	// MaxRequestElements caps the JSON elements of a body, counted before
	// decoding (413 above). Default DefaultMaxRequestElements.
	MaxRequestElements int
	// MaxConcurrentReviews caps the reviews decoded and evaluated at once,
	// which bounds memory; a request waits up to ReviewSlotWait for a slot
	// and is then answered 429. Default DefaultMaxConcurrentReviews().
	MaxConcurrentReviews int
	// ReviewSlotWait bounds the wait for a review slot, and for room under
	// MaxRequestBytesInFlight. Default 2s, well inside the webhook
	// configurations' 5s timeout.
	ReviewSlotWait time.Duration
	// MaxRequestBytesInFlight caps the request bytes held at once, from
	// the first byte read to the answer: a count of reviews does not bound
	// their bytes, and a review's decoded form is several times its body.
	// A request waits up to ReviewSlotWait for room, then gets 429.
	// Default DefaultMaxRequestBytesInFlight(MaxRequestBytes).
	MaxRequestBytesInFlight int64
	// RequestBodyTimeout bounds the arrival of a body once its headers are
	// read; a stalled body gets 400 while the connection can still carry
	// the answer. Default DefaultRequestBodyTimeout.
	RequestBodyTimeout time.Duration
	// MinRequestBodyRate, when positive, is how fast in bytes a second a
	// body must arrive after its first second (bodyPace), so a sender
	// that declares a large body and sends it slowly gives back the room
	// it holds under MaxRequestBytesInFlight within about a second. 0:
	// RequestBodyTimeout alone.
	MinRequestBodyRate int64
	// AnswerWriteTimeout bounds how long an answer may take to leave, from
	// when it begins to be written: a caller that does not read its
	// answers has its connection closed then, and the answer counted in
	// Stalls. Default DefaultAnswerWriteTimeout.
	AnswerWriteTimeout time.Duration
	// Stalls, when set, counts the answers cut by AnswerWriteTimeout.
	Stalls *Stalls
	// KnownRole reports whether a role is one of the policy set's, so that
	// only known roles become metric labels (the rest count as "unknown").
	// Default: the roles of the Engine's current set when the Decider is a
	// *policies.Engine, else no role is known.
	KnownRole func(string) bool
	// Clock stamps request time; tests inject a fake one.
	Clock clock.PassiveClock
	// Logger receives operational messages (panics).
	Logger *slog.Logger
	// DecisionLog receives one JSON line per decision; default Logger.
	DecisionLog *slog.Logger
	// DecisionLines, when set, receives each request's decision line
	// instead of DecisionLog, written directly in the form
	// slog.NewJSONHandler gives it, one Write per line: the form of a
	// DecisionLog that is a JSON handler over this writer, without slog's
	// cost per line. Safe for concurrent Writes, as batchwrite.Writer is.
	DecisionLines io.Writer
	// Metrics, when set, counts requests and latencies.
	Metrics *Metrics
	// Answers, when set, counts answers and failed answers (the role's
	// onError answered, or our own 5xx) for strict health's error ratio.
	Answers *health.Answers
	// Activity, when set, counts each request in progress, from before its
	// body is read to its answer written: the shadow judges in the moments
	// when none is (shadow.Options.Activity).
	Activity *activity.Activity
	// Tracer, when set, records a span tree per request (decode, role,
	// window, policy evaluation with each package, encode), continuing the
	// caller's W3C trace context. nil: no tracing, at no cost.
	Tracer trace.Tracer
}

const (
	pathValidate = "/validate"
	pathMutate   = "/mutate"
)

// NewHandler routes POST /validate and POST /mutate to d. It uses gin as the
// router only: recovery, decoding and responses are ours, because a webhook
// must answer every failure with a well-formed AdmissionReview.
func NewHandler(d Decider, opts HandlerOptions) http.Handler {
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxRequestElements <= 0 {
		opts.MaxRequestElements = DefaultMaxRequestElements
	}
	if opts.MaxConcurrentReviews <= 0 {
		opts.MaxConcurrentReviews = DefaultMaxConcurrentReviews()
	}
	if opts.ReviewSlotWait <= 0 {
		opts.ReviewSlotWait = DefaultReviewSlotWait
	}
	if opts.MaxRequestBytesInFlight <= 0 {
		opts.MaxRequestBytesInFlight = DefaultMaxRequestBytesInFlight(opts.MaxRequestBytes)
	}
	// A review of the largest accepted size must fit on its own.
	opts.MaxRequestBytesInFlight = max(opts.MaxRequestBytesInFlight, opts.MaxRequestBytes)
	if opts.RequestBodyTimeout <= 0 {
		opts.RequestBodyTimeout = DefaultRequestBodyTimeout
	}
	if opts.AnswerWriteTimeout <= 0 {
		opts.AnswerWriteTimeout = DefaultAnswerWriteTimeout
	}
	if opts.KnownRole == nil {
		opts.KnownRole = knownRoleOf(d)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DecisionLog == nil {
		opts.DecisionLog = opts.Logger
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(recoverWithReview(opts.Logger))
	h := &handler{decider: d, opts: opts, slots: make(chan struct{}, opts.MaxConcurrentReviews),
		bytes: semaphore.NewWeighted(opts.MaxRequestBytesInFlight)}
	r.POST(pathValidate, h.serve(policies.PathValidate))
	r.POST(pathMutate, h.serve(policies.PathMutate))
	r.NoMethod(func(c *gin.Context) {
		writeRequestError(c.Writer, &requestError{status: http.StatusMethodNotAllowed,
			message: fmt.Sprintf("method %s is not allowed on %s; the apiserver sends POST", c.Request.Method, c.Request.URL.Path)})
	})
	r.NoRoute(func(c *gin.Context) {
		writeRequestError(c.Writer, &requestError{status: http.StatusNotFound,
			message: fmt.Sprintf("no webhook at %s; use %s or %s", c.Request.URL.Path, pathValidate, pathMutate)})
	})
	return r
}

type handler struct {
	decider Decider
	opts    HandlerOptions
	// slots holds one token per review being decoded and evaluated.
	slots chan struct{}
	// bytes holds the bytes of the requests being read and judged.
	bytes *semaphore.Weighted
}

// DefaultRequestBodyTimeout is how long a body may take after its headers:
// the apiserver sends a review at once, and the server's write deadline
// (30s from the headers) must leave room to answer.
const DefaultRequestBodyTimeout = 10 * time.Second

// DefaultMinRequestBodyRate is qn-webhook's --min-request-body-rate: 1 MiB
// a second, far below what an apiserver sends at (its largest review, a
// 3 MiB UPDATE, then has 4 s), and enough that holding the whole of the
// request bytes in flight costs a sender that much bandwidth.
const DefaultMinRequestBodyRate = 1 << 20

// DefaultMaxRequestBytesInFlight is a sixteenth of the Go memory limit
// (GOMEMLIMIT, or the one qn-webhook derives from its container), at least
// maxRequestBytes; without a limit, four times maxRequestBytes. A review's
// decoded objects and the mutate path's copies take several times its
// body, so this keeps the largest reviews at once well inside the limit.
func DefaultMaxRequestBytesInFlight(maxRequestBytes int64) int64 {
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 {
		return max(maxRequestBytes, limit/16)
	}
	return 4 * maxRequestBytes
}

// bodyProofBytes is the most room a request holds before its body shows
// it is coming: a body declared longer reserves this much, reads it, and
// only then reserves the rest of its length. A sender that declares a
// large body and sends nothing holds 4 KiB, not the budget (sixteen of
// them, declaring 7 MiB each, turned most reviews into 429); all the
// connections the cap admits hold 4 MiB at most that way, so the largest
// review still finds room beside them. Bodies up to this length, which
// are most reviews, reserve their length at once as before.
const bodyProofBytes = minPooledBody

// reserveBytes takes n bytes of room under MaxRequestBytesInFlight,
// waiting up to ReviewSlotWait.
func (h *handler) reserveBytes(r *http.Request, n int64) (release func(), err *requestError) {
	if h.bytes.TryAcquire(n) {
		return func() { h.bytes.Release(n) }, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.ReviewSlotWait)
	defer cancel()
	if e := h.bytes.Acquire(ctx, n); e != nil {
		if r.Context().Err() != nil {
			return nil, &requestError{status: http.StatusServiceUnavailable,
				message: "the request ended while waiting for room to read it: qn-webhook is at its limit of request bytes in flight"}
		}
		return nil, &requestError{status: http.StatusTooManyRequests, message: fmt.Sprintf(
			"qn-webhook is overloaded: reviews holding %d MiB (its limit of request bytes in flight) left no room for this %d-byte request within %s; the apiserver applies the webhook's failurePolicy, retry shortly",
			h.opts.MaxRequestBytesInFlight>>20, reservedLength(r, h.opts.MaxRequestBytes), h.opts.ReviewSlotWait)}
	}
	return func() { h.bytes.Release(n) }, nil
}

// reservedLength is the room a request's body needs in all: its declared
// length, or the largest accepted body when it declares none.
func reservedLength(r *http.Request, maxBytes int64) int64 {
	if r.ContentLength >= 0 && r.ContentLength < maxBytes {
		return max(r.ContentLength, 1)
	}
	return maxBytes
}

// DefaultReviewSlotWait is how long a request waits for a review slot.
const DefaultReviewSlotWait = 2 * time.Second

// DefaultMaxConcurrentReviews is twice the CPUs Go may use, at least 4:
// more reviews at once add memory, not throughput.
func DefaultMaxConcurrentReviews() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// acquire takes a review slot, giving up when the request ends (the
// apiserver timed out or went away) or after ReviewSlotWait.
func (h *handler) acquire(ctx context.Context) (release func(), err *requestError) {
	select {
	case h.slots <- struct{}{}:
		return func() { <-h.slots }, nil
	default:
	}
	timer := time.NewTimer(h.opts.ReviewSlotWait)
	defer timer.Stop()
	select {
	case h.slots <- struct{}{}:
		return func() { <-h.slots }, nil
	case <-ctx.Done():
		return nil, &requestError{status: http.StatusServiceUnavailable,
			message: "the request ended while waiting for a review slot: qn-webhook is at its limit of concurrent reviews"}
	case <-timer.C:
		return nil, &requestError{status: http.StatusTooManyRequests, message: fmt.Sprintf(
			"qn-webhook is overloaded: %d reviews are being evaluated and no slot freed within %s; the apiserver applies the webhook's failurePolicy, retry shortly",
			cap(h.slots), h.opts.ReviewSlotWait)}
	}
}

// knownRoleOf reads the role table of d's current policy set.
func knownRoleOf(d Decider) func(string) bool {
	return func(role string) bool {
		set := d.Current()
		if set == nil || set.Roles == nil {
			return false
		}
		_, known := set.Roles.Roles[role]
		return known
	}
}

// roleLabel keeps the role label of a metric in a closed set: the policy
// set's roles, "" when no role was resolved, and "unknown" for any name a
// caller made up (an annotation value must not mint a series).
func (h *handler) roleLabel(role string) string {
	if role == "" || h.opts.KnownRole(role) {
		return role
	}
	return "unknown"
}

func (h *handler) serve(path policies.Path) gin.HandlerFunc {
	webhook := path.String()
	return func(c *gin.Context) {
		start := time.Now()
		if a := h.opts.Activity; a != nil {
			a.Begin()
			defer a.End()
		}
		if m := h.opts.Metrics; m != nil {
			g := m.inFlight.WithLabelValues(webhook)
			g.Inc()
			defer g.Dec()
		}
		tr := h.startTrace(c.Request, webhook)
		rc := http.NewResponseController(c.Writer)
		// release gives back the review slot once one is taken; it is
		// given back before an answer is written, so a caller that does
		// not read its answers holds no slot while the write waits.
		var release func()
		defer func() {
			if release != nil {
				release()
			}
		}()
		refuse := func(reqErr *requestError) {
			if release != nil {
				release()
				release = nil
			}
			d := policies.Deny(int32(reqErr.status), reasonFor(reqErr.status), reqErr.message)
			h.log(c.Request, webhook, nil, d, h.count(webhook, d, start))
			_ = rc.SetWriteDeadline(time.Now().Add(h.opts.AnswerWriteTimeout))
			err := writeRequestError(c.Writer, reqErr)
			if ferr := flushAnswer(c.Request, c.Writer); err == nil {
				err = ferr
			}
			h.stalled(err)
			tr.end(nil, d, reqErr.status)
		}
		if c.Request.ContentLength > h.opts.MaxRequestBytes {
			// Refused before any room is reserved or a byte is read.
			refuse(tooLarge(h.opts.MaxRequestBytes))
			return
		}
		// Room for the body: its whole length when it is short, else
		// the proof's, and the rest once the proof has arrived.
		length := reservedLength(c.Request, h.opts.MaxRequestBytes)
		releaseBytes, reqErr := h.reserveBytes(c.Request, min(length, bodyProofBytes))
		if reqErr != nil {
			if reqErr.status == http.StatusTooManyRequests {
				c.Header("Retry-After", "1")
			}
			refuse(reqErr)
			return
		}
		defer releaseBytes()
		var releaseRest func()
		defer func() {
			if releaseRest != nil {
				releaseRest()
			}
		}()
		// A body that stalls is refused while the connection can still
		// carry the answer (its write deadline is later).
		pace := &bodyPace{start: time.Now(), rate: h.opts.MinRequestBodyRate, set: rc.SetReadDeadline}
		pace.deadline = pace.start.Add(h.opts.RequestBodyTimeout)
		_ = rc.SetReadDeadline(pace.first())
		body, pooled, reqErr := readReviewBody(c.Request, h.opts.MaxRequestBytes, pace, func() *requestError {
			// The wait for room is not the sender's delay.
			began := time.Now()
			var e *requestError
			releaseRest, e = h.reserveBytes(c.Request, length-bodyProofBytes)
			pace.pause(time.Since(began))
			return e
		})
		if reqErr != nil {
			if reqErr.status == http.StatusTooManyRequests {
				c.Header("Retry-After", "1")
			}
			refuse(reqErr)
			return
		}
		// The body's room serves another request once this one is
		// answered and logged: nothing of it outlives the handler
		// (bodypool.go).
		defer pooled.release()
		// The body is read before a slot is taken, so a slow sender cannot
		// hold one; decoding and evaluation, which cost memory, take one.
		release, reqErr = h.acquire(c.Request.Context())
		if reqErr != nil {
			if reqErr.status == http.StatusTooManyRequests {
				c.Header("Retry-After", "1")
			}
			refuse(reqErr)
			return
		}
		step := tr.step("decode")
		rev, objs, reqErr := decodeBody(body, h.opts.MaxRequestElements, h.decider)
		endStep(step)
		if reqErr != nil {
			refuse(reqErr)
			return
		}
		// A panic from here on is answered with the request's uid
		// (recoverWithReview answers one before it without).
		uid := rev.Request.UID
		defer func() {
			if p := recover(); p != nil {
				answerPanic(h.opts.Logger, c, uid, p)
			}
		}()
		// A caller that reset or closed the connection once it had sent
		// the review reads no answer: it is not judged, and takes no slot
		// of its rate window (the engine asks again before counting).
		if err := callerGone(c.Request.Context()); err != nil {
			h.abandoned(c.Request, webhook, "judging", rev.Request, err)
			return
		}
		ctx := policies.WithCaller(tr.ctx, func() error { return callerGone(c.Request.Context()) })
		answer, in, d := answerDecoded(ctx, h.decider, rev.Request, objs, path, h.opts.Clock.Now())
		release()
		release = nil
		if d.CallerGone {
			h.abandoned(c.Request, webhook, "counting", rev.Request, errors.New(d.Message))
			return
		}
		step = tr.step("encode")
		_ = rc.SetWriteDeadline(time.Now().Add(h.opts.AnswerWriteTimeout))
		err := writeReview(c.Writer, http.StatusOK, answer)
		elapsed := h.count(webhook, d, start)
		if ferr := flushAnswer(c.Request, c.Writer); err == nil {
			err = ferr
		}
		endStep(step)
		h.stalled(err)
		h.log(c.Request, webhook, in, d, elapsed)
		tr.end(in, d, http.StatusOK)
	}
}

// abandoned logs and counts a review not judged because its caller went
// away at stage; nothing is written back.
func (h *handler) abandoned(r *http.Request, webhook, stage string, req *admissionv1.AdmissionRequest, why error) {
	if m := h.opts.Metrics; m != nil {
		m.abandoned.WithLabelValues(webhook, stage).Inc()
	}
	h.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "review not judged: its caller went away",
		slog.String("webhook", webhook), slog.String("stage", stage), slog.String("uid", field(string(req.UID))),
		slog.String("user", field(req.UserInfo.Username)), slog.String("operation", string(req.Operation)),
		slog.String("remote", r.RemoteAddr), slog.String("reason", why.Error()))
}

// stalled counts an answer its caller did not take within the answer
// write deadline; the server closes the connection after such an error.
func (h *handler) stalled(err error) {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		h.opts.Stalls.stalled(time.Now())
	}
}

// Answer judges one decoded AdmissionRequest exactly as the webhook does
// and returns the AdmissionReview it would send, with the input and the
// decision behind it. qnctl calls it, so offline answers are the server's.
func Answer(ctx context.Context, d Decider, req *admissionv1.AdmissionRequest, path policies.Path, now time.Time) (*admissionv1.AdmissionReview, *policies.Input, policies.Decision) {
	return answerDecoded(ctx, d, req, nil, path, now)
}

// answerDecoded is Answer with the objects already decoded when objs is set.
func answerDecoded(ctx context.Context, d Decider, req *admissionv1.AdmissionRequest, objs *decodedObjects, path policies.Path, now time.Time) (*admissionv1.AdmissionReview, *policies.Input, policies.Decision) {
	_, span := tracing.Child(ctx, "input")
	in, err := extractInput(req, objs, now)
	tracing.End(span, err)
	if err != nil {
		dec := policies.BadRequest(err.Error())
		return review(req.UID, dec, path), &policies.Input{Request: req}, dec
	}
	var dec policies.Decision
	if path == policies.PathMutate {
		dec = d.Mutate(ctx, in)
	} else {
		dec = d.Validate(ctx, in)
	}
	return review(req.UID, dec, path), in, dec
}

// DecodeReview decodes an AdmissionReview body with the webhook's rules
// (at most DefaultMaxRequestElements elements and MaxRequestDepth levels,
// case-sensitive, duplicate keys refused, admission.k8s.io/v1 only, a
// request with a uid required).
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	rev, _, reqErr := decodeBody(body, DefaultMaxRequestElements, nil)
	if reqErr != nil {
		return nil, reqErr
	}
	return rev, nil
}

// log writes the decision line and the metrics of one request: one JSON
// line per decision, allowed or denied. Object bodies are never logged (a
// Secret's data must not reach a log); reasons and warnings are ours.
func (h *handler) log(req *http.Request, webhook string, in *policies.Input, d policies.Decision, elapsed time.Duration) {
	line := newDecisionLine(req, webhook, in, d, elapsed)
	if w := h.opts.DecisionLines; w != nil {
		line.Write(w, time.Now())
		return
	}
	// The record is handed to the handler directly: Logger.LogAttrs would
	// also walk the stack for a source position the decision log never
	// prints (runtime.Callers, about 1 % of a request's CPU).
	if l := h.opts.DecisionLog.Handler(); l.Enabled(req.Context(), slog.LevelInfo) {
		r := slog.NewRecord(time.Now(), slog.LevelInfo, decisionlog.AdmissionMessage, 0)
		r.AddAttrs(line.Attrs()...)
		_ = l.Handle(req.Context(), r)
	}
}

// count records an answer in the metrics and in strict health's error
// ratio, and says how long it took. It runs before the answer is sent, so
// whoever reads them after receiving an answer finds it counted.
func (h *handler) count(webhook string, d policies.Decision, start time.Time) time.Duration {
	elapsed := time.Since(start)
	if m := h.opts.Metrics; m != nil {
		m.requests.WithLabelValues(webhook, h.roleLabel(d.Role), outcome(d), strconv.Itoa(int(d.Code))).Inc()
		m.latency.WithLabelValues(webhook).Observe(elapsed.Seconds())
	}
	if a := h.opts.Answers; a != nil {
		a.Record(d.PolicyFailed || d.Code >= http.StatusInternalServerError)
	}
	return elapsed
}

// field clips one caller-controlled value of a decision line.
func field(s string) string { return clip.String(s, clip.FieldBytes) }

// messages clips a list of reasons or warnings, which may quote the object.
func messages(list []string) []string {
	return clip.Strings(list, clip.ListItems, clip.MessageBytes)
}

// recoverWithReview turns a panic into a 500 AdmissionReview, so the
// apiserver gets an answer (and applies its failurePolicy with our
// message) instead of a dropped connection. Once a request is decoded,
// serve answers its panics itself, with the request's uid.
func recoverWithReview(logger *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if p := recover(); p != nil {
				answerPanic(logger, c, "", p)
			}
		}()
		c.Next()
	}
}

// answerPanic logs the panic p and, unless an answer has begun, answers
// the request with a 500 AdmissionReview that carries uid.
func answerPanic(logger *slog.Logger, c *gin.Context, uid types.UID, p any) {
	if p == http.ErrAbortHandler {
		panic(p)
	}
	logger.Error("panic while handling admission request", "uid", string(uid), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	if c.Writer.Written() {
		return
	}
	d := policies.InternalError(fmt.Sprintf("qn-webhook failed while handling this request (internal error: %v); it keeps serving", p))
	writeReview(c.Writer, http.StatusInternalServerError, review(uid, d, policies.PathValidate))
	c.Abort()
}
