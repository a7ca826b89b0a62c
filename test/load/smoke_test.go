package load

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// TestSmoke runs the comparison in miniature against the real binaries:
// qn-webhook (bundled policies, a policy directory with extra roles, and
// a shadow policy set),
// the bare-TLS ceiling, and OPA when its binary is already built (make
// bench builds it once; building it here would add minutes to CI). A few
// hundred requests per target through closed and open loops, every answer
// checked: no wrong answer, no transport error. No timing is asserted.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs qn-webhook and the ceiling")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	webhookBin, err := harness.Build(ctx, dir, "./cmd/qn-webhook")
	if err != nil {
		t.Fatal(err)
	}
	ceilingBin, err := harness.Build(ctx, dir, "./test/load/cmd/ceiling")
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]*Server{}
	t.Cleanup(func() {
		for name, s := range servers {
			if err := s.Stop(); err != nil {
				t.Errorf("stop %s: %v\n%s", name, err, s.Logs())
			}
		}
	})
	start := func(name string, s *Server, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		servers[name] = s
	}
	s, err := StartWebhook(NameWebhook, webhookBin, filepath.Join(dir, "qn-certs"))
	start(NameWebhook, s, err)
	extra := filepath.Join(dir, "policies-extra")
	if err := WriteExtraPolicies(extra, 20); err != nil {
		t.Fatal(err)
	}
	s, err = StartWebhook(NameWebhookExtra, webhookBin, filepath.Join(dir, "qn-extra-certs"), "--policy-dir", extra)
	start(NameWebhookExtra, s, err)
	candidate := filepath.Join(dir, "policies-candidate")
	if err := WriteShadowCandidate(candidate); err != nil {
		t.Fatal(err)
	}
	s, err = StartWebhookShadow(NameWebhookShadow, webhookBin, filepath.Join(dir, "qn-shadow-certs"), candidate, nil)
	start(NameWebhookShadow, s, err)
	s, err = StartCeiling(ceilingBin, filepath.Join(dir, "ceiling-certs"))
	start(NameCeiling, s, err)
	targets := []string{NameWebhook, NameWebhookShadow, NameWebhookExtra, NameCeiling}
	if version, err := OPAVersion(ctx); err != nil {
		t.Fatal(err)
	} else if bin, ok := CachedOPA(version); ok {
		s, err = StartOPA(bin, filepath.Join(dir, "opa-certs"))
		start(NameOPA, s, err)
		targets = append(targets, NameOPA)
	} else {
		t.Logf("OPA %s is not built (%s); run `make bench` once to include it in this test", version, bin)
	}

	suite := &Suite{Servers: servers, Fixtures: loadTestFixtures(t), Slices: 1}
	results, err := suite.Run(ctx, []Scenario{
		{Name: ScenarioClosedValidate, Title: "closed validate", Targets: targets,
			Load: Load{Concurrency: 4, Duration: time.Minute, MaxRequests: 150}},
		{Name: ScenarioClosedMutate, Title: "closed mutate", Mutating: true, Targets: targets,
			Load: Load{Concurrency: 4, Duration: time.Minute, MaxRequests: 100}},
		{Name: ScenarioOpenValidate, Title: "open validate", Targets: targets,
			Load: Load{Concurrency: 16, Rate: 200, Duration: 300 * time.Millisecond}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range results {
		for _, name := range targets {
			sl := sc.Slices[name]
			if len(sl) != 1 {
				t.Fatalf("%s %s: %d slices, want 1", sc.Scenario.Name, name, len(sl))
			}
			r := sl[0].Result
			if r.Requests == 0 || r.Errors != 0 {
				t.Errorf("%s %s: %d requests, %d wrong answers: %s", sc.Scenario.Name, name, r.Requests, r.Errors, strings.Join(r.FirstErrors, "; "))
			}
			if want := sc.Scenario.Load.MaxRequests; want > 0 && r.Requests != want {
				t.Errorf("%s %s: %d requests, want %d", sc.Scenario.Name, name, r.Requests, want)
			}
			// A shadowed slice ends when the shadow has dealt with each
			// of its requests.
			if sh := sl[0].Shadow; (sh != nil) != (name == NameWebhookShadow) {
				t.Errorf("%s %s: shadow counts %+v", sc.Scenario.Name, name, sh)
			} else if sh != nil && (sh.Answered != r.Requests || sh.Judged+sh.Dropped != sh.Answered || sh.Judged == 0) {
				t.Errorf("%s %s: %d requests sent; the server answered %d, the shadow judged %d and dropped %d", sc.Scenario.Name, name, r.Requests, sh.Answered, sh.Judged, sh.Dropped)
			}
		}
	}
	report := &Report{Machine: DescribeMachine("test"), Scenarios: results, Slices: 1, SliceTime: time.Second, Users: DefaultUsers}
	md := report.Markdown()
	for _, name := range targets {
		if !strings.Contains(md, "| "+name+" |") {
			t.Errorf("the report has no row for %s:\n%s", name, md)
		}
	}
	if n := strings.Count(md, "Served p99 with a shadow vs without: "); n != len(results) {
		t.Errorf("the report compares the shadowed qn-webhook in %d scenarios, want %d:\n%s", n, len(results), md)
	}
}
