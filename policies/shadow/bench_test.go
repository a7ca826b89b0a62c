package shadow

import (
	"context"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// benchRig is the bundled set served on windows that run on a fake clock,
// a shadow of the same set beside it, and the realtime node's creation as
// the webhook hands it to them.
type benchRig struct {
	served   *policies.Engine
	shadow   *Shadow
	shadowed Shadowed
	clock    *clocktesting.FakePassiveClock
	in       *policies.Input
}

func newBenchRig(b *testing.B) *benchRig {
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{SkipTests: true})
	if err != nil {
		b.Fatal(err)
	}
	r := &benchRig{clock: clocktesting.NewFakePassiveClock(requestTime)}
	windows := window.NewMemoryStore(r.clock, window.MemoryOptions{})
	r.served = policies.NewEngine(set, policies.EngineOptions{Windows: windows})
	r.shadow = New(policies.NewEngine(set, policies.EngineOptions{}), Options{Served: r.served, Windows: windows})
	r.shadowed = Shadowed{Served: r.served, Shadow: r.shadow}
	object := nodeObject(b, map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"},
		map[string]string{policies.RoleAnnotation: "realtime", "qn.dev/latency-budget-ms": "20"})
	r.in = inputOf(b, nodeRequest(admissionv1.Create, "alice", object, nil), r.shadowed.ObjectReads())
	return r
}

// validate validates the realtime node with d b.N times, a second apart
// on the windows' clock, so every change has room in its window.
func (r *benchRig) validate(b *testing.B, d interface {
	Validate(context.Context, *policies.Input) policies.Decision
}) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.clock.SetTime(r.clock.Now().Add(time.Second))
		if dec := d.Validate(context.Background(), r.in); !dec.Allowed || dec.Role != "realtime" {
			b.Fatalf("%+v", dec)
		}
	}
	b.StopTimer()
}

// BenchmarkValidateRealtimeServedAlone is the served engine's answer with
// no shadow: what BenchmarkValidateRealtimeShadowed compares with.
func BenchmarkValidateRealtimeServedAlone(b *testing.B) {
	r := newBenchRig(b)
	r.validate(b, r.served)
}

// BenchmarkValidateRealtimeShadowed is BenchmarkValidateRealtimeServedAlone
// with a shadow set (the same policies) judging every request beside it at
// its default CPU share: what the served answer pays for the shadow, and
// how much of the traffic the shadow keeps up with.
func BenchmarkValidateRealtimeShadowed(b *testing.B) {
	r := newBenchRig(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.shadow.Run(ctx) }()
	r.validate(b, r.shadowed)
	judged, dropped := r.shadow.judged.Load(), r.shadow.dropped.Load()
	b.ReportMetric(float64(judged)/float64(judged+dropped)*100, "%judged")
	if n := r.shadow.disagreed.Load(); n != 0 {
		b.Fatalf("the same policies disagreed %d times", n)
	}
}

// BenchmarkJudge is one judgement of the shadow's worker: the candidate's
// evaluation through a window view, and the comparison.
func BenchmarkJudge(b *testing.B) {
	r := newBenchRig(b)
	d := r.served.Validate(context.Background(), r.in)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.shadow.judge(context.Background(), &job{path: policies.PathValidate, in: *r.in, served: d}, false)
	}
	if n := r.shadow.disagreed.Load(); n != 0 {
		b.Fatalf("the same policies disagreed %d times", n)
	}
}

// BenchmarkSubmit is what the response path pays to hand a request to the
// shadow: no worker runs, so after the queue fills every call is a drop,
// the dearer branch (a metric).
func BenchmarkSubmit(b *testing.B) {
	r := newBenchRig(b)
	d := policies.Allow()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.shadow.Submit(policies.PathValidate, r.in, d)
	}
}
