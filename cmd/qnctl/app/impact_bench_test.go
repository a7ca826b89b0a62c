package app

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/rego"
)

// BenchmarkImpactReplay100kAuditEvents replays a kube-apiserver audit log
// of 100,000 QuantumNode writes (creates, updates and deletes of 2,000
// nodes by 50 users, a write every 50 ms: about 83 minutes of a busy
// cluster) under the bundled policies and a proposal that adds a package,
// through qnctl impact as a user runs it. Figures: docs/benchmarks.md.
func BenchmarkImpactReplay100kAuditEvents(b *testing.B) {
	events := 100_000
	if n, err := strconv.Atoi(os.Getenv("QN_IMPACT_BENCH_EVENTS")); err == nil {
		events = n // a shorter run, for profiles
	}
	dir := b.TempDir()
	log := filepath.Join(dir, "audit.log")
	writeBenchAuditLog(b, log, events)
	base := filepath.Join(dir, "base")
	if err := os.CopyFS(base, rego.Bundled()); err != nil {
		b.Fatal(err)
	}
	proposed := copyDir(b, base, map[string]string{
		"ssh.rego": "package qn.ssh\n\nimport data.qn.quantumnode\n\ndeny contains msg if {\n\tquantumnode.judged\n\tsome svc in quantumnode.services\n\tsvc.port == 22\n\tmsg := \"port 22 is closed\"\n}\n",
	})
	roles := filepath.Join(proposed, "roles.yaml")
	src, err := os.ReadFile(roles)
	if err != nil {
		b.Fatal(err)
	}
	src = []byte(strings.Replace(string(src), "packages: [qn.quantumnode, qn.window, qn.mutate.managedby]", "packages: [qn.quantumnode, qn.ssh, qn.window, qn.mutate.managedby]", 1))
	if err := os.WriteFile(roles, src, 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		start, cpu := time.Now(), cpuTime(b)
		code := Main(context.Background(), []string{"impact", "--base", base, "--proposed", proposed, "--audit-log", log, "--allow-new-denials", "--skip-rego-tests"},
			Streams{Out: io.Discard, Err: io.Discard})
		if code != exitOK {
			b.Fatalf("exit %d", code)
		}
		// On a shared machine the wall clock says how busy it was; the
		// CPU time says what the replay costs.
		b.ReportMetric(float64(events)/time.Since(start).Seconds(), "events/s")
		b.ReportMetric((cpuTime(b) - cpu).Seconds(), "cpu-s")
	}
}

// writeBenchAuditLog writes n audit events: each node is created, updated
// a few times (one in ten updates adds port 22) and deleted.
func writeBenchAuditLog(tb testing.TB, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	const nodes, users = 2000, 50
	version := make([]int, nodes)
	for i := range n {
		node := i % nodes
		user := fmt.Sprintf("user-%d", (i/nodes+node)%users)
		ev := auditEvent{namespace: fmt.Sprintf("team-%d", node%20), user: user, at: time.Duration(i) * 50 * time.Millisecond, code: 200}
		name := fmt.Sprintf("edge-%d", node)
		port := 8080 + version[node]%100
		if version[node]%10 == 9 {
			port = 22
		}
		obj := fmt.Sprintf(`{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":%q,"namespace":%q,"labels":{"qn.dev/managed-by":"qn-admission"}},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883},{"name":"api","port":%d}]}}`, name, ev.namespace, port)
		switch {
		case version[node] == 0:
			ev.verb, ev.code, ev.request, ev.response = "create", 201, obj, obj
			version[node]++
		case version[node] == 12:
			ev.verb, ev.name = "delete", name
			version[node] = 0
		default:
			ev.verb, ev.name, ev.request, ev.response = "update", name, obj, obj
			version[node]++
		}
		if _, err := fmt.Fprintln(w, ev.line(tb, i)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
