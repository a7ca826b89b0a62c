package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quantumnode/qn-admission/policies"
)

// trickyStrings are what a caller may put into a message: quotes,
// backslashes, HTML, control characters, invalid UTF-8, U+2028/2029 and
// other multi-byte runes.
var trickyStrings = []string{
	"", "plain", `a "quoted" \path\`, "<script>&amp;</script>", "tab\tnew\nline\rcr\bbs\fff",
	"\x00\x01\x1f\x7f", "bad \xff\xfe utf8 \xe2\x82", "line\u2028sep\u2029par", "ünïcødé 日本語 🙂",
	"port 22 is refused: service \"ssh\" <internal>",
}

// TestAppendReviewIsJSONMarshal: every answer the webhook writes is, byte
// for byte, what json.Marshal writes: allowed, denied with a retry-after,
// patched, with warnings and audit annotations, with any string a caller
// could make us quote.
func TestAppendReviewIsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return trickyStrings[rng.IntN(len(trickyStrings))] }
	decisions := []policies.Decision{policies.Allow(), policies.Allow("warned")}
	for range 300 {
		d := policies.Deny(int32(400+rng.IntN(200)), metav1.StatusReason(pick()), pick())
		if rng.IntN(2) == 0 {
			d = policies.Allow()
			d.Message = pick()
		}
		for range rng.IntN(3) {
			d.Warnings = append(d.Warnings, pick())
		}
		if rng.IntN(2) == 0 {
			d.Revision, d.Role = "sha256:"+pick(), pick()
		}
		if rng.IntN(3) == 0 {
			d.Exempt = pick()
		}
		if rng.IntN(3) == 0 {
			d.Window = &policies.WindowState{Key: pick(), Count: rng.IntN(200), Limit: 120, PeriodSeconds: 60}
		}
		if rng.IntN(3) == 0 {
			d.RetryAfter = time.Duration(rng.IntN(90)) * time.Second
		}
		if rng.IntN(2) == 0 {
			d.Patch = []byte(`[{"op":"add","path":"/metadata/labels/x","value":"` + strings.Repeat("y", rng.IntN(40)) + `"}]`)
		}
		d.PolicyFailed = rng.IntN(5) == 0
		decisions = append(decisions, d)
	}
	for i, d := range decisions {
		for _, path := range []policies.Path{policies.PathValidate, policies.PathMutate} {
			rev := review(types.UID("uid-"+pick()), d, path)
			if i%2 == 1 {
				// An audit annotation's key is quoted as any string is.
				if rev.Response.AuditAnnotations == nil {
					rev.Response.AuditAnnotations = map[string]string{}
				}
				rev.Response.AuditAnnotations[pick()] = pick()
			}
			got, ok := appendReview(nil, rev)
			if !ok {
				t.Fatalf("decision %d: appendReview declined a review the webhook writes: %+v", i, rev.Response)
			}
			want, err := json.Marshal(rev)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("decision %d on %s:\n got  %s\n want %s", i, path, got, want)
			}
		}
	}
}

// TestAppendReviewDeclinesWhatItDoesNotWrite: a review with a request, or
// a status with fields the webhook never sets, is left to json.Marshal.
func TestAppendReviewDeclinesWhatItDoesNotWrite(t *testing.T) {
	base := func() *admissionv1.AdmissionReview {
		return review("u", policies.Deny(403, metav1.StatusReasonForbidden, "no"), policies.PathValidate)
	}
	cases := map[string]func(*admissionv1.AdmissionReview){
		"a request":           func(r *admissionv1.AdmissionReview) { r.Request = &admissionv1.AdmissionRequest{} },
		"no response":         func(r *admissionv1.AdmissionReview) { r.Response = nil },
		"a status kind":       func(r *admissionv1.AdmissionReview) { r.Response.Result.Kind = "Status" },
		"a resource version":  func(r *admissionv1.AdmissionReview) { r.Response.Result.ResourceVersion = "1" },
		"details with a name": func(r *admissionv1.AdmissionReview) { r.Response.Result.Details = &metav1.StatusDetails{Name: "x"} },
		"details with a cause": func(r *admissionv1.AdmissionReview) {
			r.Response.Result.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{}}}
		},
		"a remaining count": func(r *admissionv1.AdmissionReview) { n := int64(1); r.Response.Result.RemainingItemCount = &n },
	}
	for name, change := range cases {
		rev := base()
		change(rev)
		if _, ok := appendReview(nil, rev); ok {
			t.Errorf("%s: appendReview wrote it; json.Marshal must", name)
		}
	}
}

// FuzzAppendJSONString holds the string quoting to encoding/json's.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}

// TestAnswersFromPooledBuffersStandAlone: answers written at once on
// several goroutines from the pooled buffers are each whole, with their own
// uid and a Content-Length equal to their length, and a large answer (past
// the pooled size) does not spoil the next small one.
func TestAnswersFromPooledBuffersStandAlone(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				uid := types.UID(fmt.Sprintf("uid-%d-%d", g, i))
				d := policies.Deny(403, metav1.StatusReasonForbidden, strings.Repeat("m", (g*200+i)%300))
				if i%50 == 0 {
					d.Warnings = []string{strings.Repeat("w", 1000), strings.Repeat("x", 1000)}
					for range 40 {
						d.Warnings = append(d.Warnings, strings.Repeat("z", 1000))
					}
				}
				rec := httptest.NewRecorder()
				writeReview(rec, http.StatusOK, review(uid, d, policies.PathValidate))
				body := rec.Body.Bytes()
				if got := rec.Header().Get("Content-Length"); got != strconv.Itoa(len(body)) {
					t.Errorf("%s: Content-Length %s for %d bytes", uid, got, len(body))
					return
				}
				if got := rec.Header().Get("Content-Type"); got != "application/json" {
					t.Errorf("%s: Content-Type %q", uid, got)
					return
				}
				var rev admissionv1.AdmissionReview
				if err := json.Unmarshal(body, &rev); err != nil || rev.Response.UID != uid || rev.Response.Result.Message != d.Message {
					t.Errorf("%s: answer %.200s (%v)", uid, body, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
