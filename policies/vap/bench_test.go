package vap_test

import (
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/rego"
)

// What the compiled policy costs the API server per request: the plugin's
// own validator (CEL, variables, match conditions, message expressions)
// over the bundled role table, for the shapes a cluster sees most: an
// admitted realtime create (the table and both conditions), a refused move
// and a refused delete (the messages too), and the namespace controller's
// delete (match conditions only).
func BenchmarkThePolicyInTheAPIServersCEL(b *testing.B) {
	r, err := vap.Compile(load(b, rego.Bundled()), vap.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p, problems := compileForAPIServer(b, r, environment.DefaultCompatibilityVersion(), environment.StoredExpressions)
	if len(problems) > 0 {
		b.Fatal(problems)
	}
	// The floor: the plugin's own work for a policy of one constant rule.
	floor := *r
	floor.Policy = r.Policy.DeepCopy()
	floor.Policy.Spec.Variables, floor.Policy.Spec.MatchConditions = nil, nil
	floor.Policy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "true"}}
	trivial, _ := compileForAPIServer(b, &floor, environment.DefaultCompatibilityVersion(), environment.StoredExpressions)
	realtime := node("rt", map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "20"}, map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"})
	for name, tt := range map[string]struct {
		r      request
		denied bool
		floor  bool
	}{
		"an admitted realtime create":                 {r: request{op: admission.Create, user: "alice", groups: []string{"system:authenticated"}, namespace: "edge", object: realtime}},
		"floor: a realtime create, one constant rule": {r: request{op: admission.Create, user: "alice", groups: []string{"system:authenticated"}, namespace: "edge", object: realtime}, floor: true},
		"a refused move out of realtime": {r: request{op: admission.Update, user: "alice", groups: []string{"system:authenticated"}, namespace: "edge",
			object: node("rt", map[string]string{"qn-role": "default"}, nil), old: realtime}, denied: true},
		"a refused realtime delete": {r: request{op: admission.Delete, user: "bob", groups: []string{"system:authenticated"}, namespace: "edge", old: realtime}, denied: true},
		"the namespace controller's delete": {r: request{op: admission.Delete, user: "system:serviceaccount:kube-system:namespace-controller",
			groups: []string{"system:serviceaccounts", "system:authenticated"}, namespace: "edge", old: realtime}},
	} {
		b.Run(name, func(b *testing.B) {
			p := p
			if tt.floor {
				p = trivial
			}
			if v := p.judge(b, tt.r); v.denied != tt.denied || len(v.errors) > 0 {
				b.Fatalf("denied %v (want %v), errors %v", v.denied, tt.denied, v.errors)
			}
			b.ReportAllocs()
			// CPU time, not wall time, is what the API server spends: on a
			// shared machine the two differ.
			before := cpuTime()
			for b.Loop() {
				p.judge(b, tt.r)
			}
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
