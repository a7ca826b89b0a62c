package policies

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies/window"
)

// lowPriority is a pattern policy: QuantumNodes carry priority=low.
const lowPriority = `kind: PatternPolicy
validate:
  message: nodes must carry label priority=low
  pattern:
    metadata:
      labels:
        priority: low
`

// portRego is a Rego rule the same role also runs.
const portRego = `package p
deny contains "port 80 is reserved" if {
	some s in input.request.object.spec.services
	s.port == 80
}
`

func patternSet(t *testing.T, role string, extra fstest.MapFS) *Set {
	t.Helper()
	fsys := fstest.MapFS{
		"roles.yaml":                  {Data: []byte("defaultRole: r\nroles:\n  r:\n" + role)},
		"p.rego":                      {Data: []byte(portRego)},
		"low-priority.pattern.yaml":   {Data: []byte(lowPriority)},
		"audit-team.pattern.yaml":     {Data: []byte("kind: PatternPolicy\nvalidate:\n  message: nodes should name their team\n  failureAction: Audit\n  pattern: {metadata: {labels: {team: \"?*\"}}}\n")},
		"unused-example.pattern.yaml": {Data: []byte("kind: PatternPolicy\nvalidate: {message: m, pattern: {spec: {x: \"*\"}}}\n")},
	}
	for k, v := range extra {
		fsys[k] = v
	}
	set, err := Load(context.Background(), fsys, LoadOptions{})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return set
}

func nodeWith(labels, services string) string {
	return `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","labels":` + labels + `},"spec":{"hardware":{"arch":"arm64"},"services":` + services + `}}`
}

// TestPatternsJudgeBesideRego: a role's pattern policies are judged in the
// same step as its Rego packages and their answers merge into one decision
// that the role's enforcement shapes.
func TestPatternsJudgeBesideRego(t *testing.T) {
	const both = "    operations: [CREATE, UPDATE]\n    packages: [p]\n    patterns: [low-priority, audit-team]\n"
	lowTeam := `{"priority":"low","team":"ops"}`
	for name, tc := range map[string]struct {
		role      string
		object    string
		allowed   bool
		code      int32
		message   string
		warnings  []string
		wouldDeny []string
	}{
		"an object both admit is admitted": {
			role: both, object: nodeWith(lowTeam, `[{"name":"a","port":8080}]`), allowed: true, code: 200,
		},
		"a pattern's denial is the role's, with the policy and the path": {
			role: both, object: nodeWith(`{"priority":"high","team":"ops"}`, `[{"name":"a","port":8080}]`), code: 403,
			message: `denied by qn-admission (role "r"): nodes must carry label priority=low (pattern low-priority failed at /metadata/labels/priority/: resource value 'high' does not match 'low')`,
		},
		"Rego and pattern denials are both reasons": {
			role: both, object: nodeWith(`{"team":"ops"}`, `[{"name":"a","port":80}]`), code: 403,
			message: `denied by qn-admission (role "r"): port 80 is reserved; nodes must carry label priority=low (pattern low-priority failed at /metadata/labels/priority/: no value; the pattern wants 'low')`,
		},
		"an Audit pattern warns and admits": {
			role: both, object: nodeWith(`{"priority":"low"}`, `[{"name":"a","port":8080}]`), allowed: true, code: 200,
			warnings: []string{`nodes should name their team (pattern audit-team failed at /metadata/labels/team/: no value; the pattern wants '?*')`},
		},
		"a warn role returns a pattern's denial as a warning": {
			role: both + "    enforcement: warn\n", object: nodeWith(`{"priority":"high","team":"ops"}`, `[]`), allowed: true, code: 200,
			warnings:  []string{`not enforced (role "r" is in warn mode): denied by qn-admission (role "r"): nodes must carry label priority=low (pattern low-priority failed at /metadata/labels/priority/: resource value 'high' does not match 'low')`},
			wouldDeny: []string{`denied by qn-admission (role "r"): nodes must carry label priority=low (pattern low-priority failed at /metadata/labels/priority/: resource value 'high' does not match 'low')`},
		},
		"a dryrun role only records a pattern's denial": {
			role: both + "    enforcement: dryrun\n", object: nodeWith(`{"priority":"high","team":"ops"}`, `[]`), allowed: true, code: 200,
			wouldDeny: []string{`denied by qn-admission (role "r"): nodes must carry label priority=low (pattern low-priority failed at /metadata/labels/priority/: resource value 'high' does not match 'low')`},
		},
		"a role judged by patterns alone needs no Rego package": {
			role: "    operations: [CREATE]\n    patterns: [low-priority]\n", object: nodeWith(`{"priority":"high"}`, `[{"name":"a","port":80}]`), code: 403,
			message: `denied by qn-admission (role "r"): nodes must carry label priority=low (pattern low-priority failed at /metadata/labels/priority/: resource value 'high' does not match 'low')`,
		},
		"a role without patterns is judged by Rego alone": {
			role: "    operations: [CREATE]\n    packages: [p]\n", object: nodeWith(`{"priority":"high"}`, `[{"name":"a","port":8080}]`), allowed: true, code: 200,
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := NewEngine(patternSet(t, tc.role, nil), EngineOptions{})
			d := e.Validate(context.Background(), qnInput("CREATE", tc.object, ""))
			if d.Allowed != tc.allowed || d.Code != tc.code || d.Message != tc.message {
				t.Fatalf("decision allowed=%v code=%d message=%q\nwant allowed=%v code=%d message=%q", d.Allowed, d.Code, d.Message, tc.allowed, tc.code, tc.message)
			}
			if strings.Join(d.Warnings, "\n") != strings.Join(tc.warnings, "\n") {
				t.Errorf("warnings %q, want %q", d.Warnings, tc.warnings)
			}
			if strings.Join(d.WouldDeny, "\n") != strings.Join(tc.wouldDeny, "\n") {
				t.Errorf("wouldDeny %q, want %q", d.WouldDeny, tc.wouldDeny)
			}
		})
	}
}

// TestPatternsOnEveryPath: the old object, DELETE and the mutating path.
func TestPatternsOnEveryPath(t *testing.T) {
	const role = "    operations: [CREATE, UPDATE, DELETE]\n    patterns: [low-priority, keep-low]\n"
	keepLow := fstest.MapFS{"keep-low.pattern.yaml": {Data: []byte(`kind: PatternPolicy
match:
  operations: [UPDATE, DELETE]
  oldObject: {metadata: {labels: {priority: low}}}
validate:
  message: a low-priority node stays low and is not deleted by CI
  pattern: {metadata: {labels: {priority: low}}}
exclude:
  operations: [UPDATE]
  userInfo: {username: admin}
`)}}
	e := NewEngine(patternSet(t, role, keepLow), EngineOptions{})
	low, high := nodeWith(`{"priority":"low"}`, `[]`), nodeWith(`{"priority":"high"}`, `[]`)
	ctx := context.Background()

	if d := e.Validate(ctx, qnInput("UPDATE", high, low)); d.Code != 403 || len(d.Reasons) != 2 {
		t.Errorf("raising a low node's priority is denied by both patterns, got %d %q", d.Code, d.Reasons)
	}
	if d := e.Validate(ctx, qnInput("UPDATE", low, high)); !d.Allowed {
		t.Errorf("lowering a node's priority is admitted, got %+v", d)
	}
	in := qnInput("UPDATE", high, low)
	in.Request.UserInfo.Username = "admin"
	if d := e.Validate(ctx, in); d.Code != 403 || len(d.Reasons) != 1 || !strings.Contains(d.Reasons[0], "pattern low-priority") {
		t.Errorf("exclude leaves keep-low out for admin, not low-priority; got %d %q", d.Code, d.Reasons)
	}
	// DELETE judges the object being deleted, and only for policies that
	// list DELETE.
	if d := e.Validate(ctx, qnInput("DELETE", "", high)); !d.Allowed {
		t.Errorf("deleting a high node: keep-low's oldObject does not match and low-priority does not judge DELETE, got %+v", d)
	}
	del := qnInput("DELETE", "", low)
	if d := e.Validate(ctx, del); !d.Allowed {
		t.Errorf("deleting a low node: it still matches its own pattern, got %+v", d)
	}
	// Patterns never patch and never deny on the mutating path.
	if d := e.Mutate(ctx, qnInput("CREATE", high, "")); !d.Allowed || d.Patch != nil {
		t.Errorf("mutation is untouched by patterns, got %+v", d)
	}
}

// TestPatternDenialTakesNoWindowSlot: a request the patterns deny is not
// counted, like a Rego denial.
func TestPatternDenialTakesNoWindowSlot(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	store := window.NewMemoryStore(clk, window.MemoryOptions{})
	e := NewEngine(patternSet(t, "    operations: [CREATE]\n    window: {limit: 1, period: 60s}\n    patterns: [low-priority]\n", nil), EngineOptions{Windows: store})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		in := qnInput("CREATE", nodeWith(`{"priority":"high"}`, `[]`), "")
		in.Facts.UID = "denied-" + string(rune('a'+i))
		if d := e.Validate(ctx, in); d.Code != 403 {
			t.Fatalf("pattern denial %d: %+v", i, d)
		}
	}
	in := qnInput("CREATE", nodeWith(`{"priority":"low"}`, `[]`), "")
	in.Facts.UID = "admitted"
	if d := e.Validate(ctx, in); !d.Allowed || d.Window == nil || d.Window.Count != 1 {
		t.Fatalf("the first admitted request takes the only slot, got %+v", d)
	}
}

func TestPatternLoadErrors(t *testing.T) {
	roles := "defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n    patterns: [low-priority]\n"
	for name, tc := range map[string]struct {
		files fstest.MapFS
		want  string
	}{
		"a role naming a missing pattern": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(strings.Replace(roles, "[low-priority]", "[low-priority, low-priorty]", 1))}},
			want:  `roles.yaml:6: roles.r.patterns: "low-priorty" is not a pattern policy of the directory (known: low-priority)`,
		},
		"a role naming a pattern in a directory without any": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(roles)}, "low-priority.pattern.yaml": nil},
			want:  `roles.yaml:6: roles.r.patterns: "low-priority" is not a pattern policy of the directory (there are none)`,
		},
		"a pattern listed twice": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(strings.Replace(roles, "[low-priority]", "[low-priority, low-priority]", 1))}},
			want:  `roles.yaml:6: roles.r.patterns: "low-priority" is listed twice`,
		},
		"a pattern file with a bad anchor, even unused": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(roles)}, "policies/other.pattern.yaml": {Data: []byte("kind: PatternPolicy\nvalidate:\n  message: m\n  pattern:\n    metadata:\n      +(labels): {a: b}\n")}},
			want:  `policies/other.pattern.yaml:6: validate.pattern.metadata.+(labels): +() (add if not present) is a mutate anchor`,
		},
		"an unknown field in a pattern file": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte(roles)}, "low-priority.pattern.yaml": {Data: []byte("kind: PatternPolicy\nvalidate:\n  mesage: m\n  pattern: {a: b}\n")}},
			want:  `low-priority.pattern.yaml:3: validate.mesage: unknown field (known here: message, failureAction, pattern, anyPattern)`,
		},
		"a role with neither packages nor patterns": {
			files: fstest.MapFS{"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    patterns: []\n")}},
			want:  `roles.yaml:3: roles.r.packages: list at least one Rego package (e.g. qn.quantumnode), pattern policy (patterns: [name]) or policy (policies: [name])`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{"p.rego": {Data: []byte(portRego)}, "low-priority.pattern.yaml": {Data: []byte(lowPriority)}}
			for k, v := range tc.files {
				if v == nil {
					delete(fsys, k)
					continue
				}
				fsys[k] = v
			}
			_, err := Load(context.Background(), fsys, LoadOptions{})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestPatternFilesAreInTheRevision: editing only a pattern file is a new
// revision (decision lines and metrics say which rules judged).
func TestPatternFilesAreInTheRevision(t *testing.T) {
	role := "    operations: [CREATE]\n    patterns: [low-priority]\n"
	a := patternSet(t, role, nil)
	b := patternSet(t, role, fstest.MapFS{"low-priority.pattern.yaml": {Data: []byte(strings.Replace(lowPriority, "priority: low", "priority: \"low|lowest\"", 1))}})
	if a.Revision == b.Revision {
		t.Fatalf("both revisions are %s", a.Revision)
	}
	if c := patternSet(t, role, nil); c.Revision != a.Revision {
		t.Fatalf("the same files give %s and %s", a.Revision, c.Revision)
	}
}

func TestExplainShowsWhichPatternFired(t *testing.T) {
	e := NewEngine(patternSet(t, "    operations: [CREATE]\n    packages: [p]\n    patterns: [low-priority, audit-team]\n", nil), EngineOptions{})
	x, err := e.Explain(context.Background(), qnInput("CREATE", nodeWith(`{"priority":"high","team":"ops"}`, `[]`), ""), PathValidate)
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Patterns) != 2 {
		t.Fatalf("verdicts %+v", x.Patterns)
	}
	low, team := x.Patterns[0], x.Patterns[1]
	if low.Policy.Name != "low-priority" || low.Outcome.String() != "failed" || low.Failures[0].Path != "/metadata/labels/priority/" || low.Failures[0].Line != 7 {
		t.Errorf("low-priority: %+v", low)
	}
	if team.Policy.Name != "audit-team" || team.Outcome.String() != "passed" {
		t.Errorf("audit-team: %+v", team)
	}
	if mx, err := e.Explain(context.Background(), qnInput("CREATE", nodeWith(`{"priority":"high"}`, `[]`), ""), PathMutate); err != nil || mx.Patterns != nil {
		t.Errorf("the mutating path judges no patterns: %+v %v", mx, err)
	}
}

// TestEveryPatternProblemInOnePass: Load reports every broken pattern file
// and every unknown name together, each as a Problem with file and line.
func TestEveryPatternProblemInOnePass(t *testing.T) {
	fsys := fstest.MapFS{
		"roles.yaml":       {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    patterns: [a, b, c]\n")},
		"a.pattern.yaml":   {Data: []byte("kind: PatternPolicy\nvalidate:\n  message: m\n  pattern: {spec: {(arch: arm64}}\n")},
		"x/b.pattern.yaml": {Data: []byte("kind: PatternPolicy\nvalidate:\n  message: m\n  pattern: {spec: {replicas: \">lots\"}}\n")},
	}
	_, err := Load(context.Background(), fsys, LoadOptions{})
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("want Problems, got %v", err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, fmt.Sprintf("%s:%d %s", p.File, p.Line, p.Path))
	}
	want := []string{"a.pattern.yaml:4 validate.pattern.spec.(arch", "x/b.pattern.yaml:4 validate.pattern.spec.replicas", "roles.yaml:5 roles.r.patterns"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems\n%s\nwant\n%s\n(%v)", strings.Join(got, "\n"), strings.Join(want, "\n"), err)
	}
	if !strings.Contains(ps[2].Message, `"c" is not a pattern policy of the directory`) {
		t.Errorf("the unknown name: %s", ps[2].Message)
	}
}

// TestAuditJudgesPatternPolicies: a node a pattern refuses at admission is
// not reported compliant by the audit (nor, through it, by the
// PolicyReports and qnctl impact on stored objects); an Audit-mode pattern
// warns; a pattern whose selectors read the requester is skipped with the
// line that reads it, never passed; a DELETE-only pattern is skipped.
func TestAuditJudgesPatternPolicies(t *testing.T) {
	extra := fstest.MapFS{
		"admins-only.pattern.yaml":    {Data: []byte("kind: PatternPolicy\nmatch:\n  userInfo:\n    groups: [\"!system:masters\"]\nvalidate:\n  message: only admins\n  pattern: {metadata: {labels: {admin: \"true\"}}}\n")},
		"keep-on-delete.pattern.yaml": {Data: []byte("kind: PatternPolicy\nmatch:\n  operations: [DELETE]\nvalidate:\n  message: keep\n  pattern: {metadata: {labels: {deletable: \"true\"}}}\n")},
		"create-only.pattern.yaml":    {Data: []byte("kind: PatternPolicy\nmatch:\n  operations: [CREATE]\nvalidate:\n  message: created nodes carry a zone\n  pattern: {metadata: {labels: {zone: \"?*\"}}}\n")},
	}
	const role = "    operations: [CREATE, UPDATE]\n    packages: [p]\n    patterns: [low-priority, audit-team, admins-only, keep-on-delete, create-only]\n"
	e := NewEngine(patternSet(t, role, extra), EngineOptions{})
	node := func(labels map[string]any) map[string]any { return storedNode("edge", nil, labels, nil) }

	refused := e.Audit(context.Background(), node(map[string]any{"priority": "high", "team": "ops", "zone": "a"}))
	want := []string{
		"admins-only.validate=skip", "audit-team.validate=pass", "create-only.validate=pass",
		"keep-on-delete.validate=skip", "low-priority.validate=fail", "p.deny=pass",
	}
	if got := verdicts(refused); !slices.Equal(got, want) {
		t.Fatalf("verdicts %q, want %q", got, want)
	}
	if refused.Compliant() {
		t.Fatal("a node the low-priority pattern refuses at admission is reported compliant")
	}
	if v := strings.Join(refused.Violations(), "; "); !strings.Contains(v, "pattern low-priority failed at /metadata/labels/priority/") {
		t.Errorf("violations %q do not say which pattern failed where", v)
	}
	for _, rr := range refused.Rules {
		switch rr.Package {
		case "admins-only":
			if len(rr.Skipped) != 1 || rr.Skipped[0].Location != "admins-only.pattern.yaml:4" || !strings.Contains(rr.Messages[0], "request.userInfo") {
				t.Errorf("admins-only: skipped %+v messages %q; want it skipped at its userInfo line, naming request.userInfo", rr.Skipped, rr.Messages)
			}
		case "keep-on-delete":
			if !strings.Contains(strings.Join(rr.Messages, ""), "judges DELETE only") {
				t.Errorf("keep-on-delete: messages %q do not say why it is skipped", rr.Messages)
			}
		}
	}

	warned := e.Audit(context.Background(), node(map[string]any{"priority": "low", "zone": "a"}))
	if !warned.Compliant() || warned.Count(VerdictWarn) != 1 || warned.Count(VerdictFail) != 0 {
		t.Fatalf("a node missing only the Audit pattern's team label: %q compliant=%v, want compliant with one warn", verdicts(warned), warned.Compliant())
	}
	noZone := e.Audit(context.Background(), node(map[string]any{"priority": "low", "team": "ops"}))
	if got := verdicts(noZone); !slices.Contains(got, "create-only.validate=fail") || noZone.Compliant() {
		t.Errorf("a CREATE-only pattern is not judged against a stored node as its creation: %q", got)
	}

	skips := AuditSkips(context.Background(), e.Current())
	if s := skips["admins-only.validate"]; len(s) != 1 || s[0].Reads[0] != "request.userInfo" {
		t.Errorf("AuditSkips[admins-only.validate] = %+v, want the pattern that reads request.userInfo", s)
	}
}
