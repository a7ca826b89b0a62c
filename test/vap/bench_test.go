package vap

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/quantumnode/qn-admission/test/harness"
)

// The cost of double enforcement: API server latency of one QuantumNode
// create (a realtime node, so the policy evaluates the role table and both
// conditions) with qn-webhook alone and with qn-webhook and the policy,
// and the CPU the API server and qn-webhook spend per create. The creates
// are real (stored), sequential, spread over 64 users so no rate window
// fills. The two configurations run interleaved, in blocks of 25 creates,
// into two namespaces, one of them excluded from the policy's binding: a
// shared machine's load falls on both alike. docs/benchmarks.md has the
// figures.
//
//	KUBEBUILDER_ASSETS=$(make -s k8s-bins) go test ./test/vap/ -run XXX -bench . -benchtime 1000x -count 3
func BenchmarkCreateThroughTheAPIServer(b *testing.B) {
	ctx := context.Background()
	// Each run writes into namespaces of its own, deleted after it by the
	// namespace controller (the control plane is in no rate window).
	if err := cluster.StartControllerManager(); err != nil {
		b.Fatalf("%v\n%s", err, cluster.ControllerManagerLogs())
	}
	apiServer, err := cluster.APIServerPID()
	if err != nil {
		b.Fatal(err)
	}
	benchRuns++
	type side struct {
		name      string
		ns        string
		users     []dynamic.ResourceInterface
		latencies []time.Duration
		apiCPU    time.Duration
		hookCPU   time.Duration
	}
	var sides []*side
	for _, name := range []string{"webhook", "webhook+policy"} {
		s := &side{name: name, ns: fmt.Sprintf("bench-%d-%d", benchRuns, len(sides))}
		if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = cluster.Kube.CoreV1().Namespaces().Delete(ctx, s.ns, metav1.DeleteOptions{}) }()
		for i := range 64 {
			s.users = append(s.users, nodes(as(b, fmt.Sprintf("bench-user-%02d", i)), s.ns))
		}
		sides = append(sides, s)
	}
	alone, both := sides[0], sides[1]
	// The policy judges every namespace but alone's, as the webhook does.
	if err := applyPolicy(ctx, "--mode", "enforce", "--exclude-namespace", "kube-system,"+alone.ns); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := applyPolicy(ctx, "--mode", "enforce"); err != nil {
			b.Error(err)
		}
	}()
	waitForPolicy(b)
	harness.WaitFor(b, 60*time.Second, "the binding to leave "+alone.ns+" to the webhook", func() error {
		_, err := nodes(cluster.Dynamic, alone.ns).Create(ctx, qn("probe", map[string]string{"qn-role": "probe-unknown"}, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !webhookRefused(err, "names no known role") {
			return fmt.Errorf("not the webhook's refusal yet: %v", err)
		}
		return nil
	})
	webhookMu.Lock()
	w := webhook
	webhookMu.Unlock()
	if w == nil {
		b.Fatal("qn-webhook is down")
	}
	create := func(s *side, phase string, i int) time.Duration {
		start := time.Now()
		if _, err := s.users[i%len(s.users)].Create(ctx, realtime(fmt.Sprintf("%s-%d", phase, i)), metav1.CreateOptions{}); err != nil {
			b.Fatalf("%s: create %d: %v", s.name, i, err)
		}
		return time.Since(start)
	}
	for _, s := range sides { // warm every client's connection
		for i := range s.users {
			create(s, "warm", i)
		}
	}
	const block = 25
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		order := sides
		if done/block%2 == 1 {
			order = []*side{both, alone}
		}
		for _, s := range order {
			apiBefore, _ := harness.ReadProc(apiServer)
			hookBefore, _ := harness.ReadProc(w.PID())
			for i := done; i < done+block && i < b.N; i++ {
				s.latencies = append(s.latencies, create(s, "n", i))
			}
			apiAfter, _ := harness.ReadProc(apiServer)
			hookAfter, _ := harness.ReadProc(w.PID())
			s.apiCPU += apiAfter.CPU - apiBefore.CPU
			s.hookCPU += hookAfter.CPU - hookBefore.CPU
		}
	}
	b.StopTimer()
	for _, s := range sides {
		slices.Sort(s.latencies)
		n := float64(len(s.latencies))
		b.ReportMetric(ms(s.latencies[len(s.latencies)/2]), s.name+"-p50-ms")
		b.ReportMetric(ms(s.latencies[len(s.latencies)*99/100]), s.name+"-p99-ms")
		b.ReportMetric(ms(s.apiCPU)/n, s.name+"-apiserver-cpu-ms/op")
		b.ReportMetric(ms(s.hookCPU)/n, s.name+"-webhook-cpu-ms/op")
	}
}

// benchRuns numbers the benchmark's runs, for namespaces of their own.
var benchRuns int

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
