package webhook

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// addReviewSeeds seeds a fuzz target with every AdmissionReview the
// repository keeps as a fixture, and the bodies of the bad-input table.
func addReviewSeeds(f *testing.F) {
	f.Helper()
	for _, pattern := range []string{"../test/testdata/*.json", "../test/load/testdata/*.json"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			body, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(body)
		}
	}
	for _, body := range []string{
		reviewBody("CREATE", validObject),
		reviewBody("UPDATE", validObject),
		reviewBody("DELETE", "null"),
		reviewBody("CREATE", withRole("batch")),
		reviewBody("CREATE", `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"a","name":"b"}}`),
		reviewBody("CREATE", `[`+strings.Repeat("[", 200)),
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","UID":"v"}}`,
		"", "null", "{}", "[]",
	} {
		f.Add([]byte(body))
	}
}

// FuzzDecodeAndAnswer feeds arbitrary bodies through the webhook's
// decoding, context extraction and the bundled policies. Whatever the
// bytes, the webhook refuses them with a status and a message, or answers
// an AdmissionReview that echoes the uid, with a bounded message.
func FuzzDecodeAndAnswer(f *testing.F) {
	addReviewSeeds(f)
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{EvalTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	// The two ways of answering compared below each have an engine and
	// windows of their own, on a clock that stands still: both see the
	// same requests in the same order, so the same window state (asked of
	// one engine twice, the second ask would be a repeat of the first's
	// uid and see the slot the first took), and a refusal says the same
	// "a slot frees in".
	newEngine := func() *policies.Engine {
		windows := window.NewGuard(window.NewMemoryStore(clocktesting.NewFakePassiveClock(now), window.MemoryOptions{}), window.GuardOptions{Name: "memory"})
		return policies.NewEngine(set, policies.EngineOptions{Windows: windows})
	}
	engine, servedEngine := newEngine(), newEngine()
	f.Fuzz(func(t *testing.T, body []byte) {
		rev, objs, reqErr := decodeBody(body, DefaultMaxRequestElements, engine)
		// Decoding the objects in part (what the bundled policies read of
		// the request's kind) accepts and refuses as decoding them whole
		// does.
		wholeRev, wholeObjs, wholeErr := decodeBody(body, DefaultMaxRequestElements, nil)
		if !reflect.DeepEqual(reqErr, wholeErr) || !reflect.DeepEqual(rev, wholeRev) || (objs == nil) != (wholeObjs == nil) {
			t.Fatalf("in part: %v, %+v, objects %v; whole: %v, %+v, objects %v", reqErr, rev, objs != nil, wholeErr, wholeRev, wholeObjs != nil)
		}
		if reqErr != nil {
			if reqErr.status < 400 || reqErr.message == "" {
				t.Fatalf("a refusal needs an error status and a message, got %d %q", reqErr.status, reqErr.message)
			}
			return
		}
		if rev.Request == nil || rev.Request.UID == "" {
			t.Fatal("a decoded review always has a request with a uid")
		}
		for _, path := range []policies.Path{policies.PathValidate, policies.PathMutate} {
			answer, _, d := Answer(context.Background(), engine, rev.Request, path, now)
			// The server's way, with the objects read in the envelope's
			// pass when the one-pass decoder took the body, and only what
			// the policies read of them, answers alike.
			served, _, _ := answerDecoded(context.Background(), servedEngine, rev.Request, objs, path, now)
			if !reflect.DeepEqual(served.Response, answer.Response) {
				t.Fatalf("objects decoded with the envelope: %+v; decoded apart: %+v", served.Response, answer.Response)
			}
			r := answer.Response
			if r == nil || r.UID != rev.Request.UID || r.Result == nil {
				t.Fatalf("the answer must echo uid %q, got %+v", rev.Request.UID, r)
			}
			if r.Allowed != d.Allowed || (!r.Allowed && r.Result.Message == "") {
				t.Fatalf("a denial says why: allowed=%v message=%q", r.Allowed, r.Result.Message)
			}
			if len(r.Result.Message) > 4096+32 || !utf8.ValidString(r.Result.Message) && utf8.ValidString(d.Message) {
				t.Fatalf("the message is bounded and not broken by clipping: %d bytes", len(r.Result.Message))
			}
			if path == policies.PathValidate && len(r.Patch) > 0 {
				t.Fatal("a validating answer never carries a patch")
			}
		}
	})
}
