package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// withRole puts a qn-role annotation on validObject.
func withRole(role string) string {
	return strings.Replace(validObject, `"namespace":"edge"}`, `"namespace":"edge","annotations":{"qn-role":`+mustJSON(role)+`}}`, 1)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func bundledEngine(t *testing.T) *policies.Engine {
	t.Helper()
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return policies.NewEngine(set, policies.EngineOptions{})
}

func TestMadeUpRolesShareOneMetricSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewHandler(bundledEngine(t), HandlerOptions{
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		DecisionLog: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:     NewMetrics(reg),
	})
	for i := range 50 {
		// The mutating webhook never denies: it only leaves the object alone.
		a := post(t, h, http.MethodPost, "/mutate", "application/json", reviewBody("CREATE", withRole(fmt.Sprintf("made-up-%d-%s", i, strings.Repeat("r", 1000)))))
		if !a.review.Response.Allowed || a.review.Response.Patch != nil {
			t.Fatalf("an unknown role is not mutated, got %.200s", a.raw)
		}
	}
	post(t, h, http.MethodPost, "/mutate", "application/json", reviewBody("CREATE", withRole("batch")))
	if n := testutil.CollectAndCount(reg, "qn_admission_requests_total"); n != 2 {
		t.Fatalf("50 made-up roles and one real one: want 2 series (unknown, batch), got %d", n)
	}
	var out bytes.Buffer
	if err := testutil.CollectAndCompare(reg, strings.NewReader(""), "qn_admission_requests_total"); err != nil {
		out.WriteString(err.Error())
	}
	if !strings.Contains(out.String(), `role="unknown"`) || !strings.Contains(out.String(), `role="batch"`) || strings.Contains(out.String(), "made-up") {
		t.Fatalf("the role label is batch or unknown, never the annotation value:\n%s", out.String())
	}
}

func TestCallerControlledStringsAreClippedInLogsAndAnswers(t *testing.T) {
	var log bytes.Buffer
	h := NewHandler(bundledEngine(t), HandlerOptions{
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		DecisionLog: slog.New(slog.NewJSONHandler(&log, nil)),
	})
	huge := strings.Repeat("x", 1<<20)
	body := reviewBody("CREATE", withRole(huge))
	body = strings.Replace(body, `"username":"alice"`, `"username":"`+huge+`"`, 1)
	body = strings.Replace(body, `"groups":["edge-ops"]`, `"groups":["`+huge+`","g2"]`, 1)
	a := post(t, h, http.MethodPost, "/validate", "application/json", body)
	msg := a.review.Response.Result.Message
	if len(msg) > 4096+32 || !strings.Contains(msg, "names no known role") || !strings.Contains(msg, "bytes)") {
		t.Fatalf("the answer's message is clipped to 4 KiB with a marker, got %d bytes: %.200s", len(msg), msg)
	}
	if n := log.Len(); n > 16<<10 {
		t.Fatalf("one decision line of a request with 1 MiB user, group and role is %d bytes; want it bounded", n)
	}
	var line map[string]any
	if err := json.Unmarshal(log.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	wantUser := strings.Repeat("x", 256) + fmt.Sprintf("…(+%d bytes)", 1<<20-256)
	if role, _ := line["role"].(string); line["user"] != wantUser || len(role) > len(wantUser) {
		t.Fatalf("user and role are clipped to 256 bytes with a marker, got user %.300v role %.300v", line["user"], line["role"])
	}
	if groups, _ := line["groups"].([]any); len(groups) != 2 || len(groups[0].(string)) > len(wantUser) || groups[1] != "g2" {
		t.Fatalf("each group is clipped, got %.300v", line["groups"])
	}
}

func TestTheElementBudgetRefusesBeforeDecoding(t *testing.T) {
	h := bundledHandler(t)
	var services strings.Builder
	for i := range DefaultMaxRequestElements {
		if i > 0 {
			services.WriteString(",")
		}
		fmt.Fprintf(&services, `{"name":"s%d","port":%d}`, i, 1+i%65535)
	}
	many := reviewBody("CREATE", strings.Replace(validObject, `[{"name":"mqtt","port":8883}]`, "["+services.String()+"]", 1))
	deep := reviewBody("CREATE", strings.Replace(validObject, `"spec":`, `"deep":`+strings.Repeat("[", 1000)+strings.Repeat("]", 1000)+`,"spec":`, 1))
	for name, tc := range map[string]struct {
		body, want string
	}{
		"20,000 services are more elements than one review may hold": {body: many, want: "more than 20000 JSON elements"},
		"1,000 nested arrays are deeper than a review may nest":      {body: deep, want: "deeper than 100 levels"},
	} {
		t.Run(name, func(t *testing.T) {
			a := post(t, h, http.MethodPost, "/validate", "application/json", tc.body)
			if a.status != http.StatusRequestEntityTooLarge || a.review.Response.Result.Code != 413 || !strings.Contains(a.review.Response.Result.Message, tc.want) {
				t.Fatalf("want 413 saying %q, got %d %.300s", tc.want, a.status, a.raw)
			}
		})
	}
	a := post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject))
	if !a.review.Response.Allowed {
		t.Fatalf("the next normal request is admitted, got %s", a.raw)
	}
}

// A body no longer than the element budget is not scanned ahead of
// decoding: the one-pass decoder keeps the depth bound as it reads, in
// the members it builds and in those it skips, and anything it does not
// take is scanned before the strict decoder. Whatever the path, a review
// nested one level past MaxRequestDepth gets checkBudget's 413 and one
// at the bound is judged.
func TestDepthIsBoundedOnEveryDecodingPath(t *testing.T) {
	h := bundledHandler(t)
	nest := func(levels int) string { return strings.Repeat("[", levels) + strings.Repeat("]", levels) }
	places := map[string]func(levels int) string{
		// spec is read by the bundled rules: decoded.
		"in the spec": func(levels int) string {
			return reviewBody("CREATE", strings.Replace(validObject, `"spec":{`, `"spec":{"deep":`+nest(levels)+`,`, 1))
		},
		// status is read by no rule: skipped.
		"in a member no rule reads": func(levels int) string {
			return reviewBody("CREATE", strings.Replace(validObject, `"spec":`, `"status":{"deep":`+nest(levels)+`},"spec":`, 1))
		},
		// a response member makes the one-pass decoder hand the body to
		// the strict decoder.
		"in a body the strict decoder reads": func(levels int) string {
			body := reviewBody("CREATE", strings.Replace(validObject, `"spec":`, `"deep":`+nest(levels)+`,"spec":`, 1))
			return strings.Replace(body, `"request":`, `"response":{"uid":"x","allowed":true},"request":`, 1)
		},
	}
	for name, at := range places {
		t.Run(name, func(t *testing.T) {
			refused := 0
			for levels := 90; levels <= 100; levels++ {
				body := at(levels)
				if len(body) > DefaultMaxRequestElements {
					t.Fatalf("the body is %d bytes, longer than the element budget: it would be scanned first", len(body))
				}
				tooDeep := checkBudget([]byte(body), DefaultMaxRequestElements) != nil
				a := post(t, h, http.MethodPost, "/validate", "application/json", body)
				if got := a.status == http.StatusRequestEntityTooLarge; got != tooDeep {
					t.Fatalf("%d nested arrays: refused as too deep %v, want %v (checkBudget): %d %.300s", levels, got, tooDeep, a.status, a.raw)
				}
				if tooDeep {
					refused++
					if !strings.Contains(a.review.Response.Result.Message, "deeper than 100 levels") {
						t.Fatalf("%d nested arrays: want checkBudget's message, got %.300s", levels, a.raw)
					}
				}
			}
			if refused == 0 || refused == 11 {
				t.Fatalf("the levels tried must cross the bound, %d of 11 refused", refused)
			}
		})
	}
}

func TestBudgetCountsOnlyStructureOutsideStrings(t *testing.T) {
	for name, tc := range map[string]struct {
		body    string
		max     int
		wantErr bool
	}{
		"commas and brackets inside strings do not count": {body: `{"a":"[[[,,,{{{","b":"\"[,"}`, max: 3},
		"three members fit a budget of three":             {body: `{"a":1,"b":2,"c":3}`, max: 3},
		"four members do not":                             {body: `{"a":1,"b":2,"c":3,"d":4}`, max: 3, wantErr: true},
		"array items count like members":                  {body: `[1,2,3,4]`, max: 3, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			if err := checkBudget([]byte(tc.body), tc.max); (err != nil) != tc.wantErr {
				t.Fatalf("checkBudget(%s, %d) = %v, want error %v", tc.body, tc.max, err, tc.wantErr)
			}
		})
	}
}

func TestOverloadIsAClearAnswerAndPassesWhenASlotFrees(t *testing.T) {
	started := make(chan struct{}, 1)
	unblock := make(chan struct{})
	h := NewHandler(fakeDecider{validate: func(context.Context, *policies.Input) policies.Decision {
		select {
		case started <- struct{}{}:
			<-unblock
		default:
		}
		return policies.Allow()
	}}, HandlerOptions{
		Logger:               slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxConcurrentReviews: 1,
		ReviewSlotWait:       50 * time.Millisecond,
	})
	var wg sync.WaitGroup
	wg.Add(1)
	var first answer
	go func() {
		defer wg.Done()
		first = post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject))
	}()
	<-started
	a := post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject))
	if a.status != http.StatusTooManyRequests || a.review.Response.Result.Code != 429 || !strings.Contains(a.review.Response.Result.Message, "overloaded: 1 reviews") {
		t.Fatalf("with its one slot busy, want a 429 review saying so, got %d %s", a.status, a.raw)
	}
	close(unblock)
	wg.Wait()
	if !first.review.Response.Allowed {
		t.Fatalf("the request holding the slot completes, got %s", first.raw)
	}
	if a := post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject)); !a.review.Response.Allowed {
		t.Fatalf("once the slot frees, requests pass again, got %s", a.raw)
	}
}

func TestAWaitingRequestGivesUpWhenItsContextEnds(t *testing.T) {
	h := &handler{opts: HandlerOptions{ReviewSlotWait: time.Hour}, slots: make(chan struct{}, 1)}
	h.slots <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release, err := h.acquire(ctx)
	if release != nil || err == nil || err.status != http.StatusServiceUnavailable {
		t.Fatalf("a cancelled request must not wait an hour for a slot, got %v", err)
	}
}

// TestBudgetSkipsStringsAsAByteByByteScanWould compares checkBudget, which
// jumps from quote to quote, with the byte-by-byte state machine it
// replaced, on random bodies dense in quotes, backslashes and structure:
// the same answer, at the same byte.
func TestBudgetSkipsStringsAsAByteByByteScanWould(t *testing.T) {
	reference := func(body []byte, maxElements int) error {
		elements, depth := 0, 0
		inString, escaped := false, false
		for i, b := range body {
			if inString {
				switch {
				case escaped:
					escaped = false
				case b == '\\':
					escaped = true
				case b == '"':
					inString = false
				}
				continue
			}
			switch b {
			case '"':
				inString = true
			case '{', '[':
				depth++
				if depth > MaxRequestDepth {
					return fmt.Errorf("depth at %d", i)
				}
				elements++
			case '}', ']':
				depth--
			case ',':
				elements++
			}
			if elements > maxElements {
				return fmt.Errorf("elements at %d", i)
			}
		}
		return nil
	}
	// at extracts the byte offset both implementations name.
	at := func(err error) string {
		if err == nil {
			return "accepted"
		}
		kind := "elements"
		if strings.Contains(err.Error(), "deeper") || strings.HasPrefix(err.Error(), "depth") {
			kind = "depth"
		}
		var n int
		msg := err.Error()
		if i := strings.Index(msg, "at byte "); i >= 0 {
			_, _ = fmt.Sscanf(msg[i+8:], "%d", &n)
		} else if i := strings.LastIndex(msg, " at "); i >= 0 {
			_, _ = fmt.Sscanf(msg[i+4:], "%d", &n)
		}
		return fmt.Sprintf("%s at %d", kind, n)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	const alphabet = `{}[],"\\\\\\a:1 `
	for i := range 20000 {
		body := make([]byte, rng.IntN(120))
		for j := range body {
			body[j] = alphabet[rng.IntN(len(alphabet))]
		}
		if rng.IntN(10) == 0 { // deep nesting now and then
			body = append(bytes.Repeat([]byte("["), MaxRequestDepth+rng.IntN(3)-1), body...)
		}
		limit := rng.IntN(20)
		if got, want := at(checkBudget(body, limit)), at(reference(body, limit)); got != want {
			t.Fatalf("case %d, %q with limit %d: %s; the byte-by-byte scan says %s", i, body, limit, got, want)
		}
	}
}

// TestABodyHoldsItsProofUntilItComes: a request that declares the whole
// of the request bytes in flight and sends nothing holds only its proof
// (4 KiB), so a review beside it finds room at once; once its first 4 KiB
// arrive it reserves the rest, and its body, sent in full, is judged.
func TestABodyHoldsItsProofUntilItComes(t *testing.T) {
	h := NewHandler(fakeDecider{validate: func(context.Context, *policies.Input) policies.Decision { return policies.Allow() }}, HandlerOptions{
		Logger:                  slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxRequestBytes:         1 << 20,
		MaxRequestBytesInFlight: 1 << 20,
		ReviewSlotWait:          50 * time.Millisecond,
	})
	// A review padded to all but 8 bytes of the budget with a long
	// label, sent later.
	padded := func(n int) string {
		return reviewBody("CREATE", `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","labels":{"pad":"`+strings.Repeat("p", n)+`"}},"spec":{"hardware":{"arch":"arm64"}}}`)
	}
	big := padded(1<<20 - 8 - len(padded(0)))
	pr, pw := io.Pipe()
	req := httptest.NewRequest(http.MethodPost, "/validate", pr)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(big))
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, req)
	}()
	time.Sleep(20 * time.Millisecond) // it reserved its proof and waits for bytes
	if a := post(t, h, http.MethodPost, "/validate", "application/json", reviewBody("CREATE", validObject)); !a.review.Response.Allowed {
		t.Fatalf("a review beside a body declared and not sent: %d %s", a.status, a.raw)
	}
	if _, err := io.WriteString(pw, big); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	<-done
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allowed":true`) {
		t.Fatalf("the declared body, sent at last: %d %.300s", rec.Code, rec.Body.String())
	}
}
