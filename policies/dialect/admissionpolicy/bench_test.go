package admissionpolicy_test

import (
	"testing"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

// BenchmarkEvaluate is one QuantumNode request judged by one policy: the
// matching, the parameters, the CEL (variables, validations, message
// expressions) and the findings.
func BenchmarkEvaluate(b *testing.B) {
	pols := read(b, map[string]string{"p.yaml": agreementPolicies})
	admitted := qnRequest("CREATE", quantumNode("n1", map[string]string{"team": "ops"}, "arm64", 8883), nil)
	denied := qnRequest("CREATE", quantumNode("n1", map[string]string{"team": "ops"}, "amd64", 80), nil)
	for _, c := range []struct {
		name, policy string
		req          *dialect.Request
		findings     int
	}{
		{"params_admitted", "allowed-arch", admitted, 0},
		{"params_denied", "allowed-arch", denied, 1},
		{"matchConditions_admitted", "ports", admitted, 0},
		{"matchConditions_denied", "ports", denied, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := pols[c.policy]
			b.ReportAllocs()
			for b.Loop() {
				if got := evaluate(p, c.req); len(got) != c.findings {
					b.Fatalf("%+v", got)
				}
			}
		})
	}
}

// BenchmarkAutogen is a ValidatingPolicy of Pods judging a Pod, and a
// Deployment through its autogen variant (the policy's constraints
// tried first, then the variants').
func BenchmarkAutogen(b *testing.B) {
	p := read(b, map[string]string{"p.yaml": podPolicy("p", noLatest)})["p"]
	for _, c := range []struct {
		name     string
		req      *dialect.Request
		findings int
	}{
		{"pod_denied", workloadRequest("CREATE", "Pod", podSpec("nginx:latest", nil), nil, nil), 1},
		{"deployment_admitted", workloadRequest("CREATE", "Deployment", podSpec("nginx:1.27", nil), nil, nil), 0},
		{"deployment_denied", workloadRequest("CREATE", "Deployment", podSpec("nginx:latest", nil), nil, nil), 1},
		{"cronjob_denied", workloadRequest("CREATE", "CronJob", podSpec("nginx:latest", nil), nil, nil), 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := evaluate(p, c.req); len(got) != c.findings {
					b.Fatalf("%+v", got)
				}
			}
		})
	}
}
