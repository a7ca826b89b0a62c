package policies

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// The batch role as bundled (its priority rule in Rego) against the same
// role with the rule as the bundled pattern policy: the whole engine step
// (role, window, the role's other packages, the rule), and the rule alone
// in a role that runs nothing else.
func batchSets(b *testing.B) map[string]*Set {
	b.Helper()
	fsys := fstest.MapFS{}
	if err := fs.WalkDir(rego.Bundled(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(rego.Bundled(), p)
		fsys[p] = &fstest.MapFile{Data: data}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	roles := strings.TrimRight(string(fsys[RolesFile].Data), "\n") + `
  rule-rego:
    operations: [CREATE]
    packages: [qn.roles.batch]
  rule-pattern:
    operations: [CREATE]
    patterns: [batch-priority-low]
`
	sets := map[string]*Set{}
	for name, r := range map[string]string{
		"rego":    roles,
		"pattern": strings.Replace(roles, "packages: [qn.quantumnode, qn.roles.batch, qn.window, qn.mutate.managedby]", "packages: [qn.quantumnode, qn.window, qn.mutate.managedby]\n    patterns: [batch-priority-low]", 1),
	} {
		fsys[RolesFile] = &fstest.MapFile{Data: []byte(r)}
		set, err := Load(context.Background(), fsys, LoadOptions{SkipTests: true})
		if err != nil {
			b.Fatal(err)
		}
		sets[name] = set
	}
	return sets
}

func batchInput(role, priority string) *Input {
	in := qnInput("CREATE", `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","annotations":{"qn-role":"`+role+`"},"labels":{"priority":"`+priority+`"}},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883}]}}`, "")
	in.Facts.Labels = map[string]string{"priority": priority}
	in.Facts.UID = "u"
	return in
}

func benchBatch(b *testing.B, set *Set, role, priority string, allowed bool) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	e := NewEngine(set, EngineOptions{Windows: window.NewMemoryStore(clk, window.MemoryOptions{})})
	in := batchInput(role, priority)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		// A slot frees every 2 s of fake time: the 30-per-minute window
		// never fills.
		clk.SetTime(clk.Now().Add(2 * time.Second))
		if d := e.Validate(ctx, in); d.Allowed != allowed {
			b.Fatalf("allowed %v: %s", d.Allowed, d.Message)
		}
	}
}

func BenchmarkBatchRule(b *testing.B) {
	sets := batchSets(b)
	for _, tc := range []struct {
		name, set, role, priority string
		allowed                   bool
	}{
		{"role batch, Rego rule, admitted", "rego", "batch", "low", true},
		{"role batch, pattern rule, admitted", "pattern", "batch", "low", true},
		{"role batch, Rego rule, denied", "rego", "batch", "high", false},
		{"role batch, pattern rule, denied", "pattern", "batch", "high", false},
		{"the rule alone, Rego, admitted", "rego", "rule-rego", "low", true},
		{"the rule alone, pattern, admitted", "rego", "rule-pattern", "low", true},
		{"the rule alone, Rego, denied", "rego", "rule-rego", "high", false},
		{"the rule alone, pattern, denied", "rego", "rule-pattern", "high", false},
	} {
		b.Run(strings.ReplaceAll(tc.name, " ", "_"), func(b *testing.B) {
			benchBatch(b, sets[tc.set], tc.role, tc.priority, tc.allowed)
		})
	}
}
