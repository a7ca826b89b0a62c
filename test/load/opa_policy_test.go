package load

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
)

// The OPA target's policy (test/load/opa/policy), evaluated in process
// with the OPA module the project links: every fixture gets the decision
// qn-webhook gives, in a well-formed AdmissionReview, on both paths. This
// keeps the comparison honest without building the opa command in CI.
func TestOPAPolicyAnswersEveryFixtureAsQnWebhookDoes(t *testing.T) {
	ctx := context.Background()
	prepare := func(query string) rego.PreparedEvalQuery {
		q, err := rego.New(rego.Query(query), rego.Load([]string{filepath.Join("opa", "policy")}, nil)).PrepareForEval(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	// system.main is the default decision (opa/config.yaml); system.mutate
	// is what OPAMutatePath asks for.
	queries := map[bool]rego.PreparedEvalQuery{false: prepare("data.system.main"), true: prepare("data.system.mutate")}
	checker := &Checker{Judge: true}
	for _, f := range loadTestFixtures(t) {
		for mutating, q := range queries {
			call := Call{Fixture: f, Mutating: mutating}
			t.Run(call.String(), func(t *testing.T) {
				var input map[string]any
				if err := json.Unmarshal(f.Body("uid-1", "alice"), &input); err != nil {
					t.Fatal(err)
				}
				rs, err := q.Eval(ctx, rego.EvalInput(input))
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) != 1 || len(rs[0].Expressions) != 1 {
					t.Fatalf("result %v: want one AdmissionReview", rs)
				}
				body, err := json.Marshal(rs[0].Expressions[0].Value)
				if err != nil {
					t.Fatal(err)
				}
				if err := checker.Check(call, "uid-1", 200, "application/json", body); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
