package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// bundledFixtures are the fixture cases of the bundled policies.
const bundledFixtures = "../../../test/fixtures/bundled"

// serverStore is the server's in-process window store, every key holding n
// changes made at the request time before the request arrives. It is the
// test's own, so the server side does not share qnctl's code for it.
type serverStore struct {
	mem  *window.MemoryStore
	n    int
	once sync.Map
}

func (s *serverStore) prepare(ctx context.Context, key string, limit window.Limit) {
	if _, done := s.once.LoadOrStore(key, true); done {
		return
	}
	for i := 0; i < s.n && i < limit.Count; i++ {
		_, _ = s.mem.Take(ctx, key, limit, "earlier-"+strconv.Itoa(i))
	}
}

func (s *serverStore) PeekWith(ctx context.Context, onErr window.OnStoreError, key string, limit window.Limit) (window.Answer, error) {
	s.prepare(ctx, key, limit)
	return s.mem.PeekWith(ctx, onErr, key, limit)
}

func (s *serverStore) TakeWith(ctx context.Context, onErr window.OnStoreError, key string, limit window.Limit, uid string) (window.Answer, error) {
	s.prepare(ctx, key, limit)
	return s.mem.TakeWith(ctx, onErr, key, limit, uid)
}

func (s *serverStore) Release(ctx context.Context, key string, r window.Receipt) error {
	return s.mem.Release(ctx, key, r)
}

// bundledSet loads the bundled policies once, as qn-webhook does at start.
var bundledSet = sync.OnceValues(func() (*policies.Set, error) {
	return policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{EvalTimeout: time.Second})
})

// server is qn-webhook's HTTP handler over the bundled policies, as the
// chart wires it, at a fixed time, with n changes already in every window.
func server(t *testing.T, now time.Time, n int) http.Handler {
	t.Helper()
	h, _, _ := chartServer(t, now, n, false)
	return h
}

func post(t *testing.T, h http.Handler, path string, body []byte) []byte {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("POST %s: HTTP %d: %s", path, rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes()
}

// askServer sends a review through the webhooks the way the apiserver
// does and returns the response bodies: the mutating webhook's, then (if it
// admitted) the validating webhook's with the patched object.
func askServer(t *testing.T, h http.Handler, review []byte, mode string) [][]byte {
	t.Helper()
	if mode == webhookValidate {
		return [][]byte{post(t, h, "/validate", review)}
	}
	mutated := post(t, h, "/mutate", review)
	if mode == webhookMutate {
		return [][]byte{mutated}
	}
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(mutated, &answer); err != nil {
		t.Fatal(err)
	}
	if !answer.Response.Allowed {
		return [][]byte{mutated}
	}
	next := review
	if len(answer.Response.Patch) > 0 {
		var rev admissionv1.AdmissionReview
		if err := json.Unmarshal(review, &rev); err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(answer.Response.Patch)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := p.Apply(rev.Request.Object.Raw)
		if err != nil {
			t.Fatal(err)
		}
		rev.Request.Object = runtime.RawExtension{Raw: obj}
		if next, err = json.Marshal(&rev); err != nil {
			t.Fatal(err)
		}
	}
	return [][]byte{mutated, post(t, h, "/validate", next)}
}

// flagsFor turns a fixture case into the qnctl eval command line a person
// would type for it.
func flagsFor(t *testing.T, c *loadedCase) []string {
	t.Helper()
	dir := t.TempDir()
	input := filepath.Join(dir, "input.json")
	if err := os.WriteFile(input, c.Spec.Input.JSON, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"eval", input}
	s := c.Spec
	if s.Old != nil {
		old := filepath.Join(dir, "old.json")
		if err := os.WriteFile(old, s.Old.JSON, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--old", old)
	}
	if s.Operation != "" {
		args = append(args, "--operation", s.Operation)
	}
	if s.User != nil {
		args = append(args, "--user", *s.User)
	}
	for _, g := range s.Groups {
		args = append(args, "--group", g)
	}
	if s.Namespace != "" {
		args = append(args, "--namespace", s.Namespace)
	}
	if s.Resource != "" {
		args = append(args, "--resource", s.Resource)
	}
	if s.Role != "" {
		args = append(args, "--role", s.Role)
	}
	if s.DryRun != nil {
		args = append(args, fmt.Sprintf("--dry-run=%t", *s.DryRun))
	}
	return args
}

// The proof of "one engine": for every fixture case of the bundled
// policies, qnctl eval prints byte for byte the response bodies qn-webhook's
// handler writes for the same review, whether qnctl is given the review or
// the object and flags.
func TestWebhookAndEvalGiveByteIdenticalDecisions(t *testing.T) {
	cases := bundledCases(t, time.Now().UTC())
	if len(cases) < 40 {
		t.Fatalf("only %d bundled fixture cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			review, err := c.Spec.reviewBytes()
			if err != nil {
				t.Fatal(err)
			}
			want := askServer(t, server(t, c.Now, c.Windows), review, c.Webhook)
			common := []string{"--skip-rego-tests", "-o", "review", "--webhook", c.Webhook, "--time", c.Now.Format(time.RFC3339Nano), "--window-count", strconv.Itoa(c.Windows)}

			reviewFile := filepath.Join(t.TempDir(), "review.json")
			if err := os.WriteFile(reviewFile, review, 0o644); err != nil {
				t.Fatal(err)
			}
			ways := map[string][]string{
				"given the review": append([]string{"eval", reviewFile}, common...),
			}
			if !isReview(c.Spec.Input) {
				ways["given the object and flags"] = append(flagsFor(t, c), common...)
			}
			for way, args := range ways {
				_, out, errOut := run(t, "", args...)
				got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
				if len(got) != len(want) {
					t.Fatalf("%s: qnctl printed %d answers, the webhook gave %d\nqnctl:\n%s%s", way, len(got), len(want), out, errOut)
				}
				for i := range want {
					if got[i] != string(want[i]) {
						t.Errorf("%s: answer %d differs\nqnctl:   %s\nwebhook: %s", way, i+1, got[i], want[i])
					}
				}
			}
		})
	}
}

// bundledCases loads the bundled policies' fixture cases, their times
// relative to now.
func bundledCases(t *testing.T, now time.Time) []*loadedCase {
	t.Helper()
	files, err := fixtureFiles(bundledFixtures)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := loadFixtures(files, now)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}
