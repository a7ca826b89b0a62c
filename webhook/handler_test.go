package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/internal/activity"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// fakeDecider is a struct of funcs: each test sets only what it needs.
type fakeDecider struct {
	WholeObjects
	validate func(context.Context, *policies.Input) policies.Decision
	mutate   func(context.Context, *policies.Input) policies.Decision
}

func (f fakeDecider) Validate(ctx context.Context, in *policies.Input) policies.Decision {
	return f.validate(ctx, in)
}
func (f fakeDecider) Mutate(ctx context.Context, in *policies.Input) policies.Decision {
	return f.mutate(ctx, in)
}

func bundledHandler(t *testing.T) http.Handler {
	t.Helper()
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return NewHandler(policies.NewEngine(set, policies.EngineOptions{}), HandlerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

const validObject = `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","namespace":"edge"},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883}]}}`

func reviewBody(op, object string) string {
	return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"7f0b2d1c-0001","kind":{"group":"qn.dev","version":"v1alpha1","kind":"QuantumNode"},"resource":{"group":"qn.dev","version":"v1alpha1","resource":"quantumnodes"},"namespace":"edge","name":"edge-1","operation":"` + op + `","userInfo":{"username":"alice","groups":["edge-ops"]},"object":` + object + `}}`
}

type answer struct {
	status int
	review admissionv1.AdmissionReview
	raw    string
}

func post(t *testing.T, h http.Handler, method, path, contentType, body string) answer {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	a := answer{status: rec.Code, raw: rec.Body.String()}
	if err := json.Unmarshal(rec.Body.Bytes(), &a.review); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, rec.Body.String())
	}
	if a.review.APIVersion != "admission.k8s.io/v1" || a.review.Kind != "AdmissionReview" || a.review.Response == nil {
		t.Fatalf("response is not a well-formed AdmissionReview: %s", rec.Body.String())
	}
	return a
}

func TestBadInputGetsAClearAnswer(t *testing.T) {
	big := reviewBody("CREATE", `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"x","annotations":{"pad":"`+strings.Repeat("x", DefaultMaxRequestBytes)+`"}}}`)
	cases := map[string]struct {
		method, path, contentType, body string
		wantStatus                      int
		wantCode                        int32
		wantUID                         string
		wantMessage                     string
	}{
		"an empty body": {
			body: "", wantStatus: 400, wantCode: 400, wantMessage: "request body is empty",
		},
		"a body that is not JSON": {
			body: "apiVersion: admission.k8s.io/v1", wantStatus: 400, wantCode: 400, wantMessage: "request body is not an AdmissionReview: invalid character 'a'",
		},
		"JSON of the wrong shape": {
			body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"yes"}`, wantStatus: 400, wantCode: 400,
			wantMessage: "cannot unmarshal string into field AdmissionReview.request",
		},
		"a JSON array": {
			body: `[1,2]`, wantStatus: 400, wantCode: 400, wantMessage: "cannot unmarshal array",
		},
		"an AdmissionReview of another version": {
			body: strings.Replace(reviewBody("CREATE", validObject), "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: `expected apiVersion "admission.k8s.io/v1" and kind "AdmissionReview", got apiVersion "admission.k8s.io/v1beta1"`,
		},
		"a review with no request": {
			body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, wantStatus: 400, wantCode: 400, wantMessage: "AdmissionReview has no request",
		},
		"a request with no uid": {
			body: strings.Replace(reviewBody("CREATE", validObject), `"uid":"7f0b2d1c-0001",`, "", 1), wantStatus: 400, wantCode: 400, wantMessage: "AdmissionReview request has no uid",
		},
		"an unknown operation": {
			body: reviewBody("PATCH", validObject), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: `request.operation "PATCH" is not one of CREATE, UPDATE, DELETE, CONNECT`,
		},
		"duplicate keys in the envelope": {
			body: strings.Replace(reviewBody("CREATE", validObject), `"operation":"CREATE"`, `"operation":"DELETE","operation":"CREATE"`, 1), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: `request body is ambiguous: duplicate field "request.operation"`,
		},
		"duplicate keys deep inside the object": {
			body: reviewBody("CREATE", strings.Replace(validObject, `"arch":"arm64"`, `"arch":"arm64","arch":"riscv"`, 1)), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: `request.object is ambiguous: duplicate field "spec.hardware.arch"`,
		},
		"keys in the wrong case are not the fields they resemble": {
			body: strings.Replace(reviewBody("CREATE", validObject), `"uid":`, `"UID":`, 1), wantStatus: 400, wantCode: 400, wantMessage: "AdmissionReview request has no uid",
		},
		"an object of another kind than the request says": {
			body: reviewBody("CREATE", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"edge-1"}}`), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: `request.object is apiVersion "apps/v1" kind "Deployment", but request.kind says qn.dev/v1alpha1 QuantumNode`,
		},
		"a QuantumNode kind on another resource": {
			body: strings.Replace(reviewBody("CREATE", validObject), `"resource":"quantumnodes"`, `"resource":"configmaps"`, 1), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: "request.kind qn.dev/v1alpha1 QuantumNode does not match request.resource qn.dev/v1alpha1 configmaps",
		},
		"a QuantumNode kind on the horizontalqnscalers resource": {
			body: strings.Replace(reviewBody("CREATE", validObject), `"resource":"quantumnodes"`, `"resource":"horizontalqnscalers"`, 1), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: "request.kind qn.dev/v1alpha1 QuantumNode does not match request.resource qn.dev/v1alpha1 horizontalqnscalers",
		},
		"a HorizontalQNScaler kind on the quantumnodes resource": {
			body: strings.Replace(reviewBody("CREATE", validObject), `"kind":"QuantumNode"},`, `"kind":"HorizontalQNScaler"},`, 1), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: "request.kind qn.dev/v1alpha1 HorizontalQNScaler does not match request.resource qn.dev/v1alpha1 quantumnodes",
		},
		"an object that is not a JSON object": {
			body: reviewBody("CREATE", `"edge-1"`), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: "request.object is not a JSON object",
		},
		"labels that are not strings": {
			body: reviewBody("CREATE", strings.Replace(validObject, `"name":"edge-1",`, `"name":"edge-1","labels":{"a":1},`, 1)), wantStatus: 200, wantCode: 400, wantUID: "7f0b2d1c-0001",
			wantMessage: `metadata.labels["a"] is a number, not a string`,
		},
		"a body one byte over 7 MiB": {
			body: big, wantStatus: 413, wantCode: 413, wantMessage: "request body exceeds 7340032 bytes",
		},
		"a Content-Type other than JSON": {
			contentType: "application/yaml", body: reviewBody("CREATE", validObject), wantStatus: 415, wantCode: 415,
			wantMessage: `Content-Type "application/yaml" is not supported; send application/json`,
		},
		"a GET": {
			method: http.MethodGet, wantStatus: 405, wantCode: 405, wantMessage: "method GET is not allowed on /validate",
		},
		"an unknown path": {
			path: "/admit", body: reviewBody("CREATE", validObject), wantStatus: 404, wantCode: 404, wantMessage: "no webhook at /admit; use /validate or /mutate",
		},
	}
	h := bundledHandler(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
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
			a := post(t, h, method, path, ct, tc.body)
			r := a.review.Response
			if a.status != tc.wantStatus || r.Allowed || r.Result == nil || r.Result.Code != tc.wantCode {
				t.Fatalf("status %d code %v allowed %v, want status %d code %d denied: %s", a.status, r.Result, r.Allowed, tc.wantStatus, tc.wantCode, a.raw)
			}
			if string(r.UID) != tc.wantUID {
				t.Errorf("uid %q, want %q", r.UID, tc.wantUID)
			}
			if !strings.Contains(r.Result.Message, tc.wantMessage) {
				t.Errorf("message %q does not contain %q", r.Result.Message, tc.wantMessage)
			}
			if r.Patch != nil {
				t.Errorf("a refusal carries no patch")
			}
		})
	}
	// The server keeps serving after all of that.
	a := post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject))
	if a.status != 200 || !a.review.Response.Allowed {
		t.Fatalf("a valid request after the bad ones should be admitted: %s", a.raw)
	}
}

func TestResponsesAreExact(t *testing.T) {
	h := bundledHandler(t)
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		path, body string
		want       string
	}{
		"an admitted validation echoes the uid and carries no patch": {
			path: "/validate", body: reviewBody("CREATE", validObject),
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"7f0b2d1c-0001","allowed":true,"status":{"metadata":{},"status":"Success","code":200},"auditAnnotations":{"decision":"allowed","revision":"REV","role":"default","window":"1/600 per 60s by user"}}}`,
		},
		"a mutation sends a JSONPatch with its type": {
			path: "/mutate", body: reviewBody("CREATE", validObject),
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"7f0b2d1c-0001","allowed":true,"status":{"metadata":{},"status":"Success","code":200},"patch":"W3sib3AiOiJhZGQiLCJwYXRoIjoiL21ldGFkYXRhL2xhYmVscyIsInZhbHVlIjp7InFuLmRldi9tYW5hZ2VkLWJ5IjoicW4tYWRtaXNzaW9uIn19XQ==","patchType":"JSONPatch","auditAnnotations":{"decision":"allowed","revision":"REV","role":"default"}}}`,
		},
		"a mutation with nothing to change sends no patch": {
			path: "/mutate", body: reviewBody("CREATE", strings.Replace(validObject, `"namespace":"edge"`, `"namespace":"edge","labels":{"qn.dev/managed-by":"qn-admission"}`, 1)),
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"7f0b2d1c-0001","allowed":true,"status":{"metadata":{},"status":"Success","code":200},"auditAnnotations":{"decision":"allowed","revision":"REV","role":"default"}}}`,
		},
		"a denial is a 403 with every reason": {
			path: "/validate", body: reviewBody("CREATE", strings.Replace(validObject, `[{"name":"mqtt","port":8883}]`, `[{"name":"mqtt","port":8883},{"name":"mqtt","port":8884}]`, 1)),
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"7f0b2d1c-0001","allowed":false,"status":{"metadata":{},"status":"Failure","message":"denied by qn-admission (role \"default\"): service name \"mqtt\" is declared 2 times (spec.services[0], spec.services[1]); service names must be unique","reason":"Forbidden","code":403},"auditAnnotations":{"decision":"denied","revision":"REV","role":"default"}}}`,
		},
		"a warning is admitted with the warning": {
			path: "/validate", body: reviewBody("CREATE", strings.Replace(validObject, "8883", "443", 1)),
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"7f0b2d1c-0001","allowed":true,"status":{"metadata":{},"status":"Success","code":200},"auditAnnotations":{"decision":"allowed","revision":"REV","role":"default","window":"1/600 per 60s by user"},"warnings":["spec.services[0] (mqtt) uses privileged port 443: the edge node must allow binding ports below 1024"]}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := post(t, h, http.MethodPost, tc.path, "application/json", tc.body)
			// The audit annotations name the policy revision; it is the
			// bundled set's content hash.
			tc.want = strings.Replace(tc.want, "REV", set.Revision, 1)
			if a.status != 200 || a.raw != tc.want {
				t.Fatalf("got %d %s\nwant     %s", a.status, a.raw, tc.want)
			}
		})
	}
}

func TestPanicBecomesA500WithTheUID(t *testing.T) {
	calls := 0
	h := NewHandler(fakeDecider{validate: func(context.Context, *policies.Input) policies.Decision {
		calls++
		if calls == 1 {
			panic("policy table is nil")
		}
		return policies.Allow()
	}}, HandlerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	a := post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject))
	r := a.review.Response
	if a.status != 500 || r.Allowed || r.UID != "7f0b2d1c-0001" || r.Result.Code != 500 || !strings.Contains(r.Result.Message, "policy table is nil") {
		t.Fatalf("want a 500 review with the uid and the cause, got %d %s", a.status, a.raw)
	}
	if a = post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject)); a.status != 200 || !a.review.Response.Allowed {
		t.Fatalf("the server should keep serving after a panic, got %s", a.raw)
	}
}

func TestContextExtraction(t *testing.T) {
	var got policies.Input
	h := NewHandler(fakeDecider{validate: func(_ context.Context, in *policies.Input) policies.Decision {
		got = *in
		return policies.Allow()
	}}, HandlerOptions{
		Clock:  clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-2","kind":{"group":"qn.dev","version":"v1alpha1","kind":"QuantumNode"},"resource":{"group":"qn.dev","version":"v1alpha1","resource":"quantumnodes"},"subResource":"","namespace":"edge","name":"edge-1","operation":"DELETE","dryRun":true,"userInfo":{"username":"bob","uid":"b-1","groups":["g1","g2"],"extra":{"scopes":["a"]}},"oldObject":{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","labels":{"priority":"low"},"annotations":{"qn-role":"batch"}},"spec":{}}}}`
	a := post(t, h, http.MethodPost, "/validate", "application/json", body)
	if a.status != 200 {
		t.Fatalf("unexpected answer %s", a.raw)
	}
	c := got.Facts
	want := policies.Facts{
		UID: "u-2", User: "bob", UserUID: "b-1", Groups: []string{"g1", "g2"}, Extra: map[string][]string{"scopes": {"a"}},
		Operation: "DELETE", Kind: policies.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"},
		Resource:  policies.GroupVersionRes{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"},
		Namespace: "edge", Name: "edge-1", Labels: map[string]string{"priority": "low"}, Annotations: map[string]string{"qn-role": "batch"},
		Role: "batch", DryRun: true, Time: time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC),
	}
	gotJSON, _ := json.Marshal(c)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("context\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if got.ObjectValue != nil || policies.ValueAt(got.OldObjectValue, "kind") != ast.String("QuantumNode") {
		t.Fatalf("a DELETE has only oldObject decoded, got object=%v old=%v", got.ObjectValue, got.OldObjectValue)
	}
}

func TestA429TellsTheClientWhenToRetry(t *testing.T) {
	cases := map[string]struct {
		after time.Duration
		want  int32
	}{
		"a fraction of a second rounds up to one second": {after: 300 * time.Millisecond, want: 1},
		"a second and a bit rounds up to two":            {after: 1200 * time.Millisecond, want: 2},
		"whole seconds stay as they are":                 {after: 60 * time.Second, want: 60},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := policies.TooManyRequests("rate window full")
			d.RetryAfter = tc.after
			r := review("uid-1", d, policies.PathValidate).Response
			if r.Result.Details == nil || r.Result.Details.RetryAfterSeconds != tc.want || r.Result.Code != 429 {
				t.Fatalf("status %+v, want retryAfterSeconds %d", r.Result, tc.want)
			}
		})
	}
	if r := review("uid-1", policies.Deny(403, "Forbidden", "no"), policies.PathValidate).Response; r.Result.Details != nil {
		t.Errorf("a denial that is not a full window carries no retry time: %+v", r.Result.Details)
	}
}

// A number written with an exponent (a client posting straight to the
// webhook, or a document qnctl reads) is judged and quoted with the digits
// of its JSON form as the API server writes it, as the engine's reference
// evaluation sees it: 10000000, not 1e+07.
func TestNumbersAreQuotedInTheirJSONForm(t *testing.T) {
	h := bundledHandler(t)
	object := strings.Replace(validObject, `"port":8883`, `"port":1e7`, 1)
	a := post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", object))
	r := a.review.Response
	if r.Allowed || r.Result == nil {
		t.Fatalf("port 1e7 admitted: %s", a.raw)
	}
	if want := "spec.services[0].port 10000000 is out of range"; !strings.Contains(r.Result.Message, want) {
		t.Fatalf("message %q does not say %q", r.Result.Message, want)
	}
}

func TestEveryRequestCountsAsServedActivityUntilAnswered(t *testing.T) {
	activity := activity.New()
	var idleWhileJudged []bool
	judge := func(context.Context, *policies.Input) policies.Decision {
		idleWhileJudged = append(idleWhileJudged, activity.Idle())
		return policies.Allow()
	}
	h := NewHandler(fakeDecider{validate: judge, mutate: judge}, HandlerOptions{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Activity: activity})
	for _, path := range []string{"/validate", "/mutate"} {
		if a := post(t, h, http.MethodPost, path, "application/json", reviewBody("CREATE", validObject)); !a.review.Response.Allowed {
			t.Fatalf("%s: refused: %s", path, a.raw)
		}
	}
	// A refused request (a malformed body) is counted and ended too.
	post(t, h, http.MethodPost, "/validate", "application/json", "{")
	if want := []bool{false, false}; !slices.Equal(idleWhileJudged, want) {
		t.Fatalf("idle while the decider judged: %v, want %v", idleWhileJudged, want)
	}
	if !activity.Idle() {
		t.Fatal("the activity does not read idle after every request was answered")
	}
}

// flushRecorder notes what had happened when the answer was flushed.
type flushRecorder struct {
	*httptest.ResponseRecorder
	flushes      int
	loggedBefore bool
	log          *bytes.Buffer
}

func (r *flushRecorder) Flush() {
	r.flushes++
	r.loggedBefore = r.log.Len() > 0
	r.ResponseRecorder.Flush()
}

// Over HTTP/1 an answer goes out, with its length, before the decision
// line is written; over HTTP/2, where the stream ends only with the
// handler, it is not flushed early.
func TestAnAnswerIsFlushedBeforeItsDecisionLine(t *testing.T) {
	var log bytes.Buffer
	h := NewHandler(fakeDecider{validate: func(context.Context, *policies.Input) policies.Decision { return policies.Allow() }},
		HandlerOptions{Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	for _, proto := range []int{1, 2} {
		log.Reset()
		req := httptest.NewRequest(http.MethodPost, "/validate", strings.NewReader(reviewBody("CREATE", validObject)))
		req.ProtoMajor = proto
		req.Header.Set("Content-Type", "application/json")
		rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder(), log: &log}
		h.ServeHTTP(rec, req)
		if got, want := rec.Header().Get("Content-Length"), strconv.Itoa(rec.Body.Len()); got != want {
			t.Errorf("HTTP/%d: Content-Length %q, want %q (the body's length)", proto, got, want)
		}
		if log.Len() == 0 {
			t.Fatalf("HTTP/%d: no decision line", proto)
		}
		switch {
		case proto == 1 && (rec.flushes == 0 || rec.loggedBefore):
			t.Errorf("HTTP/1: flushed %d times, the decision line written before the first: %v; want the answer flushed before it", rec.flushes, rec.loggedBefore)
		case proto == 2 && rec.flushes > 0:
			t.Errorf("HTTP/2: the answer was flushed %d times before the handler returned, want none (the stream ends with the handler)", rec.flushes)
		}
	}
}
