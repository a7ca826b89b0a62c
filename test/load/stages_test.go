package load

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
	"github.com/quantumnode/qn-admission/webhook"
)

// In-process benchmarks per fixture of the stages a request crosses in
// qn-webhook that the policies and webhook packages do not measure alone
// (decode, context extraction, encode), and the whole handler per fixture:
// with the load figures they say which stage and which kind of request a
// regression or a missed target comes from. Role lookup, window and Rego
// evaluation have their own benchmarks in policies/ and policies/window/.

// admitAll is a decider that admits without judging: what is left of
// webhook.Answer is context extraction (the object decoded, labels and
// annotations read) and the review built.
type admitAll struct{ webhook.WholeObjects }

func (admitAll) Validate(context.Context, *policies.Input) policies.Decision { return policies.Allow() }
func (admitAll) Mutate(context.Context, *policies.Input) policies.Decision   { return policies.Allow() }

func BenchmarkStageDecode(b *testing.B) {
	for _, f := range loadTestFixtures(b) {
		body := f.Body("3f1c0c4e-6a7b-4d7e-9a52-000000000001", "alice")
		b.Run(strings.TrimSuffix(f.Name, ".json"), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := webhook.DecodeReview(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkStageContext(b *testing.B) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	for _, f := range loadTestFixtures(b) {
		rev, err := webhook.DecodeReview(f.Body("3f1c0c4e-6a7b-4d7e-9a52-000000000001", "alice"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strings.TrimSuffix(f.Name, ".json"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if out, _, _ := webhook.Answer(context.Background(), admitAll{}, rev.Request, policies.PathValidate, now); !out.Response.Allowed {
					b.Fatal(out.Response.Result.Message)
				}
			}
		})
	}
}

func BenchmarkStageEncode(b *testing.B) {
	rev := &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{
			UID: "3f1c0c4e-6a7b-4d7e-9a52-000000000001", Allowed: false,
			Result:   &metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden, Message: `denied by qn-admission (role "default"): port 8080 is declared 2 times (spec.services[0], spec.services[1]); each service needs its own port`},
			Warnings: []string{"spec.services[0] (http) uses privileged port 80: the edge node must allow binding ports below 1024"},
		},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(rev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandler is qn-webhook's whole handler in process for each
// fixture on each path: what the load test's server CPU per request is
// made of, minus TLS, HTTP and the network.
func BenchmarkHandler(b *testing.B) {
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{EvalTimeout: time.Second, SkipTests: true})
	if err != nil {
		b.Fatal(err)
	}
	h := webhook.NewHandler(policies.NewEngine(set, policies.EngineOptions{}), webhook.HandlerOptions{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	checker := &Checker{Judge: true}
	for _, mutating := range []bool{false, true} {
		path := "validate"
		if mutating {
			path = "mutate"
		}
		for _, f := range loadTestFixtures(b) {
			call := Call{Fixture: f, Mutating: mutating}
			b.Run(path+"/"+strings.TrimSuffix(f.Name, ".json"), func(b *testing.B) {
				var body, uid, user []byte
				var seq uint64
				b.ReportAllocs()
				for b.Loop() {
					seq++
					uid = appendUID(uid[:0], 7, seq)
					user = appendUser(user[:0], seq%DefaultUsers)
					body = f.template.build(body[:0], uid, user)
					req := httptest.NewRequest(http.MethodPost, "/"+path, strings.NewReader(string(body)))
					req.Header.Set("Content-Type", "application/json")
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if seq == 1 {
						if err := checker.Check(call, string(uid), rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
