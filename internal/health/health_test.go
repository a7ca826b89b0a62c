package health

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestProbesAnswerTheirOwnQuestion(t *testing.T) {
	var notReady, strictFails bool
	reg := prometheus.NewRegistry()
	h := NewHandler(Options{Registerer: reg, Gatherer: reg, Checks: []Check{
		{Name: "cache", Ready: func() error {
			if notReady {
				return errors.New("not synced")
			}
			return nil
		}},
		{Name: "policies", Detail: func() string { return "serving rev-1" }, Strict: func(context.Context) error {
			if strictFails {
				return errors.New("the last reload failed")
			}
			return nil
		}},
	}})
	cases := map[string]struct {
		notReady, strictFails bool
		path                  string
		code                  int
		want                  string
	}{
		"liveness is ok whatever the checks say":          {notReady: true, strictFails: true, path: "/healthz", code: 200, want: "ok\n"},
		"strict liveness fails on a strict condition":     {strictFails: true, path: "/healthz?strict=true", code: 503, want: "[-]policies failed (strict): the last reload failed\nunhealthy\n"},
		"strict liveness fails on readiness too":          {notReady: true, path: "/healthz?strict=1", code: 503, want: "[-]cache failed: not synced\n"},
		"readiness ignores strict conditions":             {strictFails: true, path: "/readyz", code: 200, want: "ok\n"},
		"readiness fails on a readiness condition":        {notReady: true, path: "/readyz", code: 503, want: "[-]cache failed: not synced\n[+]policies ok: serving rev-1\nnot ready\n"},
		"strict readiness adds the strict conditions":     {strictFails: true, path: "/readyz?strict=true", code: 503, want: "[-]policies failed (strict)"},
		"verbose lists every check with its value":        {path: "/healthz?strict=true&verbose", code: 200, want: "[+]cache ok\n[+]policies ok: serving rev-1\nok\n"},
		"a strict=false query is the plain probe":         {strictFails: true, path: "/healthz?strict=false", code: 200, want: "ok\n"},
		"the failing gauge follows the strict conditions": {strictFails: true, path: "/metrics", code: 200, want: `qn_health_check_failing{check="policies"} 1`},
		"the failing gauge is 0 for passing checks":       {path: "/metrics", code: 200, want: `qn_health_check_failing{check="policies"} 0`},
		"profiling is not served unless switched on":      {path: "/debug/pprof/", code: 404, want: ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			notReady, strictFails = c.notReady, c.strictFails
			code, body := get(t, h, c.path)
			if code != c.code || !strings.Contains(body, c.want) {
				t.Errorf("GET %s = %d %q, want %d containing %q", c.path, code, body, c.code, c.want)
			}
		})
	}
}

func TestStrictChecksAreBoundedByTheTimeout(t *testing.T) {
	h := NewHandler(Options{StrictTimeout: 50 * time.Millisecond, Checks: []Check{{Name: "store", Strict: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}}})
	start := time.Now()
	code, body := get(t, h, "/healthz?strict=true")
	if code != 503 || !strings.Contains(body, "[-]store failed (strict): context deadline exceeded") || time.Since(start) > 5*time.Second {
		t.Errorf("a hanging strict check: %d %q after %s, want 503 within the timeout", code, body, time.Since(start))
	}
}

func TestProfilingWhenSwitchedOn(t *testing.T) {
	h := NewHandler(Options{Profiling: true})
	if code, body := get(t, h, "/debug/pprof/"); code != 200 || !strings.Contains(body, "heap") {
		t.Errorf("/debug/pprof/ = %d %.60q, want the index", code, body)
	}
}

func TestAnswersRatio(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	cases := map[string]struct {
		record    func(a *Answers)
		maxRatio  float64
		wantError string
	}{
		"no answers pass": {record: func(*Answers) {}, maxRatio: 0.005},
		"fewer than the minimum answers never fail, even all failed": {record: func(a *Answers) {
			for range MinAnswersForRatio - 1 {
				a.Record(true)
			}
		}, maxRatio: 0.005},
		"one failure in 200 is at the limit and passes": {record: func(a *Answers) {
			for i := range 200 {
				a.Record(i == 0)
			}
		}, maxRatio: 0.005},
		"two failures in 200 fail with the figures": {record: func(a *Answers) {
			for i := range 200 {
				a.Record(i < 2)
			}
		}, maxRatio: 0.005, wantError: "2 of the last 10s's 200 answers (1.00 %)"},
		"failures older than the window are forgotten": {record: func(a *Answers) {
			for range 100 {
				a.Record(true)
			}
			now = now.Add(AnswerWindow)
			for range 100 {
				a.Record(false)
			}
		}, maxRatio: 0.005},
		"answers spread over the window all count": {record: func(a *Answers) {
			for s := range 10 {
				a.Record(true)
				for range 9 {
					a.Record(false)
				}
				if s < 9 {
					now = now.Add(time.Second)
				}
			}
		}, maxRatio: 0.05, wantError: "10 of the last 10s's 100 answers"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			now = time.Unix(1_800_000_000, 0)
			a := &Answers{now: func() time.Time { return now }}
			c.record(a)
			err := a.RatioCheck(c.maxRatio)(context.Background())
			switch {
			case c.wantError == "" && err != nil:
				t.Errorf("want a pass, got %v", err)
			case c.wantError != "" && (err == nil || !strings.Contains(err.Error(), c.wantError)):
				t.Errorf("want an error containing %q, got %v", c.wantError, err)
			}
		})
	}
}

// Record is lock-free: concurrent answers are all counted (run with -race).
func TestAnswersCountsConcurrentRecords(t *testing.T) {
	a := &Answers{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				a.Record(g == 0 && i%10 == 0)
			}
		})
	}
	wg.Wait()
	total, failed := a.Totals()
	// The records may straddle a second boundary; both seconds count.
	if total != 8000 || failed != 100 {
		t.Errorf("totals %d answers, %d failed, want 8000 and 100", total, failed)
	}
}

func TestAnswersRecordDoesNotAllocate(t *testing.T) {
	a := &Answers{}
	if n := testing.AllocsPerRun(1000, func() { a.Record(false) }); n != 0 {
		t.Errorf("Record allocates %v times per call, want 0 (it is on the request path)", n)
	}
}

func TestPoliciesCheck(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	o := StrictOptions{ReloadGrace: time.Minute, MaxPolicyAge: time.Hour}
	broken := errors.New("p.rego:3: rego_parse_error")
	cases := map[string]struct {
		state     ReloadState
		wantError string
	}{
		"serving the newest content passes":  {state: ReloadState{Revision: "r1", LoadedAt: now.Add(-time.Minute)}},
		"a failure within the grace passes":  {state: ReloadState{Revision: "r1", LoadedAt: now.Add(-time.Minute), FailingSince: now.Add(-30 * time.Second), Err: broken}},
		"a failure past the grace fails":     {state: ReloadState{Revision: "r1", LoadedAt: now.Add(-time.Minute), FailingSince: now.Add(-90 * time.Second), Err: broken}, wantError: "failed to load for 1m30s (grace 1m0s), still serving r1: p.rego:3: rego_parse_error"},
		"a set older than the maximum fails": {state: ReloadState{Revision: "r1", LoadedAt: now.Add(-2 * time.Hour)}, wantError: "was loaded 2h0m0s ago, longer than --strict-max-policy-age 1h0m0s"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := PoliciesCheck(func() ReloadState { return c.state }, o, func() time.Time { return now })(context.Background())
			if (c.wantError == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.wantError)) {
				t.Errorf("got %v, want %q", err, c.wantError)
			}
		})
	}
	off := StrictOptions{ReloadGrace: time.Minute}
	if err := PoliciesCheck(func() ReloadState { return ReloadState{LoadedAt: now.Add(-1000 * time.Hour)} }, off, func() time.Time { return now })(context.Background()); err != nil {
		t.Errorf("with no maximum age an old set passes: %v", err)
	}
}

func TestCertificateCheck(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	healthy := func() error { return nil }
	check := func(notAfter time.Time, healthy func() error) error {
		return CertificateCheck(healthy, func() time.Time { return notAfter }, 7*24*time.Hour, func() time.Time { return now })(context.Background())
	}
	if err := check(now.Add(30*24*time.Hour), healthy); err != nil {
		t.Errorf("30 days left passes: %v", err)
	}
	if err := check(now.Add(6*24*time.Hour), healthy); err == nil || !strings.Contains(err.Error(), "in 144h0m0s, less than --strict-cert-min-validity 168h0m0s") {
		t.Errorf("6 days left: %v, want the time left and the minimum", err)
	}
	if err := check(now.Add(30*24*time.Hour), func() error { return errors.New("still serving the previous certificate") }); err == nil || !strings.Contains(err.Error(), "previous certificate") {
		t.Errorf("an unservable rotated pair fails strict health: %v", err)
	}
}

func TestStrictOptionsValidate(t *testing.T) {
	for name, o := range map[string]StrictOptions{
		"a negative grace":       {ReloadGrace: -time.Second},
		"a negative age":         {MaxPolicyAge: -time.Second},
		"a ratio above one":      {MaxErrorRatio: 1.5},
		"a negative error ratio": {MaxErrorRatio: -0.1},
	} {
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--strict-") {
			t.Errorf("%s: %v, want an error naming the flag", name, err)
		}
	}
	if err := DefaultStrictOptions().Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
