package policies

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// storedNode is a QuantumNode as the apiserver stores it.
func storedNode(namespace string, annotations, labels map[string]any, spec map[string]any) map[string]any {
	meta := map[string]any{"name": "edge-1", "namespace": namespace, "uid": "0b5e", "generation": int64(3)}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	if labels != nil {
		meta["labels"] = labels
	}
	if spec == nil {
		spec = map[string]any{
			"hardware": map[string]any{"arch": "arm64"},
			"services": []any{map[string]any{"name": "mqtt", "port": int64(8883)}},
		}
	}
	return map[string]any{"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": meta, "spec": spec}
}

// verdicts renders an audit as "package.rule=verdict" lines.
func verdicts(r AuditResult) []string {
	var out []string
	for _, rr := range r.Rules {
		out = append(out, rr.Package+"."+rr.Rule+"="+string(rr.Verdict))
	}
	slices.Sort(out)
	return out
}

// countingStore records whether anything touched the windows.
type countingStore struct {
	window.Store
	takes, peeks int
}

func (s *countingStore) Take(ctx context.Context, key string, l window.Limit, uid string) (window.Taken, error) {
	s.takes++
	return s.Store.Take(ctx, key, l, uid)
}

func (s *countingStore) Peek(ctx context.Context, key string, l window.Limit) (window.State, error) {
	s.peeks++
	return s.Store.Peek(ctx, key, l)
}

func TestAuditJudgesTheStoredObjectUnderItsRole(t *testing.T) {
	realtimeOK := map[string]any{RoleAnnotation: "realtime", "qn.dev/latency-budget-ms": "20"}
	zone := map[string]any{"topology.kubernetes.io/zone": "cn-shanghai"}
	for name, tc := range map[string]struct {
		obj       map[string]any
		role      string
		verdicts  []string
		violation string // part of a violation, or "" when compliant
		exempt    bool
	}{
		"a valid node of the default role passes; the window warning, which reads the requester's window, is skipped": {
			obj: storedNode("apps", nil, nil, nil), role: "default",
			verdicts: []string{"qn.quantumnode.deny=pass", "qn.quantumnode.warn=pass", "qn.window.warn=skip"},
		},
		"a realtime node that lost its zone label fails the realtime rules": {
			obj: storedNode("apps", realtimeOK, nil, nil), role: "realtime",
			verdicts:  []string{"qn.quantumnode.deny=pass", "qn.quantumnode.warn=pass", "qn.roles.realtime.deny=fail", "qn.window.warn=skip"},
			violation: "realtime QuantumNodes must carry label topology.kubernetes.io/zone",
		},
		"a realtime node in an allowed zone passes": {
			obj: storedNode("apps", realtimeOK, zone, nil), role: "realtime",
			verdicts: []string{"qn.quantumnode.deny=pass", "qn.quantumnode.warn=pass", "qn.roles.realtime.deny=pass", "qn.window.warn=skip"},
		},
		"a batch node is judged although its role may not UPDATE: the audit judges the object, not a write": {
			obj: storedNode("apps", map[string]any{RoleAnnotation: "batch"}, nil, nil), role: "batch",
			verdicts:  []string{"qn.quantumnode.deny=pass", "qn.quantumnode.warn=pass", "qn.roles.batch.deny=fail", "qn.window.warn=skip"},
			violation: "batch QuantumNodes must carry label priority=low",
		},
		"a node stored with an invalid spec fails the QuantumNode rules with every message": {
			obj: storedNode("apps", nil, nil, map[string]any{"hardware": map[string]any{"arch": "riscv"}, "services": []any{}}), role: "default",
			verdicts:  []string{"qn.quantumnode.deny=fail", "qn.quantumnode.warn=pass", "qn.window.warn=skip"},
			violation: `spec.hardware.arch "riscv" is not supported`,
		},
		"a privileged port warns without failing": {
			obj: storedNode("apps", nil, nil, map[string]any{"hardware": map[string]any{"arch": "arm64"}, "services": []any{map[string]any{"name": "http", "port": int64(80)}}}), role: "default",
			verdicts: []string{"qn.quantumnode.deny=pass", "qn.quantumnode.warn=warn", "qn.window.warn=skip"},
		},
		"a node naming a role the table does not declare fails on the role table": {
			obj: storedNode("apps", map[string]any{RoleAnnotation: "gpu"}, nil, nil), role: "gpu",
			verdicts:  []string{"roles.yaml.qn-role=fail"},
			violation: `qn-role="gpu" names no known role`,
		},
		"a node in an exempt namespace is not judged": {
			obj: storedNode("kube-system", nil, nil, nil), exempt: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			store := &countingStore{Store: window.NewMemoryStore(nil, window.MemoryOptions{})}
			e, _ := stepped(t, nil)
			e.windows = window.NewGuard(store, window.GuardOptions{})
			got := e.Audit(context.Background(), tc.obj)
			if got.Revision != e.Current().Revision {
				t.Errorf("revision %q, want %q", got.Revision, e.Current().Revision)
			}
			if tc.exempt {
				if got.Exempt == "" || len(got.Rules) > 0 {
					t.Fatalf("want exempt and unjudged, got %+v", got)
				}
				return
			}
			if got.Role != tc.role {
				t.Errorf("role %q, want %q", got.Role, tc.role)
			}
			if v := verdicts(got); !slices.Equal(v, tc.verdicts) {
				t.Errorf("verdicts\n  %v\nwant\n  %v", v, tc.verdicts)
			}
			violations := strings.Join(got.Violations(), "\n")
			if tc.violation == "" != got.Compliant() || !strings.Contains(violations, tc.violation) {
				t.Errorf("compliant=%v, violations %q; want one containing %q", got.Compliant(), violations, tc.violation)
			}
			if store.takes+store.peeks != 0 {
				t.Errorf("the audit touched the rate windows (%d takes, %d peeks)", store.takes, store.peeks)
			}
		})
	}
}

// A rule that reads the requester cannot be judged from a stored object:
// with no requester it would fire for every node (or never). It is skipped,
// never counted as passed or failed, while the other definitions of the
// same rule are judged.
func TestAuditSkipsRulesThatReadTheRequester(t *testing.T) {
	fsys := fstest.MapFS{
		"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE, UPDATE]\n    packages: [p, q]\n")},
		"p.rego": {Data: []byte(`package p

deny contains "only admins" if not input.context.user in {"admin"}

deny contains msg if {
	not admin
	msg := "not an admin group"
}

admin if "admins" in input.request.userInfo.groups

deny contains "arch is amd64" if object.get(input.request, ["object", "spec", "hardware", "arch"], "") == "amd64"

deny contains "whole request" if count(input.request) > 100

warn contains "dry run" if input.context.dryRun
`)},
		"q.rego": {Data: []byte(`package q

deny contains "no zone label" if not input.context.labels.zone
`)},
	}
	e, _ := stepped(t, fsys)
	amd := storedNode("apps", nil, nil, map[string]any{"hardware": map[string]any{"arch": "amd64"}})
	got := e.Audit(context.Background(), amd)
	want := []string{"p.deny=fail", "p.warn=skip", "q.deny=fail"}
	if v := verdicts(got); !slices.Equal(v, want) {
		t.Fatalf("verdicts %v, want %v", v, want)
	}
	var deny RuleResult
	for _, rr := range got.Rules {
		if rr.Package == "p" && rr.Rule == "deny" {
			deny = rr
		}
	}
	if !slices.Equal(deny.Messages, []string{"arch is amd64"}) {
		t.Errorf("p.deny messages %q: only the judged definition may produce one", deny.Messages)
	}
	var skipped []string
	for _, s := range deny.Skipped {
		skipped = append(skipped, s.Location+" "+strings.Join(s.Reads, ","))
	}
	wantSkipped := []string{
		"p.rego:3 input.context.user",
		"p.rego:5 input.request.userInfo",
		"p.rego:14 input.request.dryRun,input.request.options,input.request.uid,input.request.userInfo",
	}
	if !slices.Equal(skipped, wantSkipped) {
		t.Errorf("skipped\n  %q\nwant\n  %q", skipped, wantSkipped)
	}
	arm := storedNode("apps", nil, map[string]any{"zone": "a"}, nil)
	if got := e.Audit(context.Background(), arm); !got.Compliant() {
		t.Errorf("an arm64 node with a zone breaks no judged rule, got %v", got.Violations())
	}
	skips := AuditSkips(context.Background(), e.Current())
	if len(skips["p.deny"]) != 3 || len(skips["p.warn"]) != 1 || len(skips["q.deny"]) != 0 {
		t.Errorf("AuditSkips %v", skips)
	}
}

// BenchmarkAuditRealtimeNode is the audit of one stored realtime node with
// the bundled policies: the input built from the object, the plan, one
// evaluation per package.
func BenchmarkAuditRealtimeNode(b *testing.B) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	e := NewEngine(set, EngineOptions{})
	obj := storedNode("apps", map[string]any{RoleAnnotation: "realtime", "qn.dev/latency-budget-ms": "20"},
		map[string]any{"topology.kubernetes.io/zone": "cn-shanghai"}, nil)
	e.Audit(context.Background(), obj) // the audit plan is built once per set
	b.ReportAllocs()
	for b.Loop() {
		if r := e.Audit(context.Background(), obj); !r.Compliant() {
			b.Fatal(r.Violations())
		}
	}
}
