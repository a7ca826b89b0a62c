package policies

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/prometheus/client_golang/prometheus"
)

// overrideSet is a role table with two packages that both refuse every
// node, a pattern policy that refuses nodes without label tier, a patch
// in each package and a window of one change, under roleEnforcement with
// the given overrides (YAML lines under the role).
func overrideSet(t *testing.T, roleEnforcement, overrides string) (*Engine, *prometheus.Registry) {
	t.Helper()
	roles := "defaultRole: r\nroles:\n  r:\n    operations: [CREATE, UPDATE]\n    packages: [old, new]\n    patterns: [tiered]\n" +
		"    window: {limit: 1, period: 60s}\n    enforcement: " + roleEnforcement + "\n" + overrides
	fsys := fstest.MapFS{
		"roles.yaml": {Data: []byte(roles)},
		"old.rego": {Data: []byte(`package old
deny contains "old rule refuses" if input.request.object.spec.bad
patch contains {"op": "add", "path": "/metadata/labels/old", "value": "yes"} if true
`)},
		"new.rego": {Data: []byte(`package new
deny contains "new rule refuses" if input.request.object.spec.bad
deny contains "new rule refuses twice" if input.request.object.spec.bad
patch contains {"op": "add", "path": "/metadata/labels/new", "value": "yes"} if true
`)},
		"tiered.pattern.yaml": {Data: []byte("kind: PatternPolicy\nvalidate:\n  message: nodes need a tier\n  pattern:\n    metadata:\n      labels:\n        tier: \"?*\"\n")},
	}
	set, err := Load(context.Background(), fsys, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	return NewEngine(set, EngineOptions{Metrics: NewMetrics(reg)}), reg
}

const (
	badTiered  = `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","labels":{"tier":"a"}},"spec":{"bad":true}}`
	goodTiered = `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","labels":{"tier":"a"}},"spec":{}}`
	badBare    = `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","labels":{}},"spec":{"bad":true}}`
)

func TestEnforcementOverrides(t *testing.T) {
	cases := map[string]struct {
		role, overrides, object string
		allowed                 bool
		message                 string
		// warnings are substrings, one per warning, in order.
		warnings  []string
		wouldDeny int
		// enforcement of each source's denials.
		denials map[string]Enforcement
	}{
		"a package in warn mode inside an enforcing role admits, with a warning that names the package": {
			role: "deny", overrides: "    packageEnforcement: {new: warn}\n    patternEnforcement: {tiered: warn}\n", object: badTiered,
			allowed: false, message: `denied by qn-admission (role "r"): old rule refuses`,
			warnings:  []string{`not enforced (package "new" is in warn mode): denied by qn-admission (role "r"): new rule refuses; new rule refuses twice`},
			wouldDeny: 1, denials: map[string]Enforcement{"old": EnforceDeny, "new": EnforceWarn},
		},
		"only the package in warn mode refuses: the request is admitted and counted": {
			role: "deny", overrides: "    packageEnforcement: {new: warn, old: warn}\n", object: badTiered,
			allowed: true,
			warnings: []string{`not enforced (package "old" is in warn mode): denied by qn-admission (role "r"): old rule refuses`,
				`not enforced (package "new" is in warn mode)`},
			wouldDeny: 2, denials: map[string]Enforcement{"old": EnforceWarn, "new": EnforceWarn},
		},
		"a package in dryrun mode is only logged": {
			role: "deny", overrides: "    packageEnforcement: {new: dryrun, old: dryrun}\n", object: badTiered,
			allowed: true, wouldDeny: 2, denials: map[string]Enforcement{"old": EnforceDryRun, "new": EnforceDryRun},
		},
		"a package enforced inside a role that only warns refuses": {
			role: "warn", overrides: "    packageEnforcement: {new: deny}\n", object: badTiered,
			allowed: false, message: `denied by qn-admission (role "r"): new rule refuses; new rule refuses twice`,
			warnings:  []string{`not enforced (role "r" is in warn mode): denied by qn-admission (role "r"): old rule refuses`},
			wouldDeny: 1, denials: map[string]Enforcement{"old": EnforceWarn, "new": EnforceDeny},
		},
		"a pattern policy in warn mode warns under its own name": {
			role: "deny", overrides: "    patternEnforcement: {tiered: warn}\n", object: strings.Replace(badBare, `"bad":true`, `"bad":false`, 1),
			allowed:  true,
			warnings: []string{`not enforced (pattern policy "tiered" is in warn mode): denied by qn-admission (role "r"): nodes need a tier`},
			denials:  map[string]Enforcement{"tiered": EnforceWarn}, wouldDeny: 1,
		},
		"without overrides every denial is the role's, as before": {
			role: "deny", object: badBare,
			allowed: false, message: `denied by qn-admission (role "r"): new rule refuses; new rule refuses twice; old rule refuses; nodes need a tier`,
			denials: map[string]Enforcement{"old": EnforceDeny, "new": EnforceDeny, "tiered": EnforceDeny},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, reg := overrideSet(t, tc.role, tc.overrides)
			d := e.Validate(context.Background(), qnInput("CREATE", tc.object, ""))
			if d.Allowed != tc.allowed || (tc.message != "" && !strings.HasPrefix(d.Message, tc.message)) {
				t.Fatalf("want allowed=%t with %q, got %+v", tc.allowed, tc.message, d)
			}
			if len(d.Warnings) != len(tc.warnings) {
				t.Fatalf("want %d warnings, got %q", len(tc.warnings), d.Warnings)
			}
			for i, w := range tc.warnings {
				if !strings.HasPrefix(d.Warnings[i], w) {
					t.Errorf("warning %d: want it to start %q, got %q", i, w, d.Warnings[i])
				}
			}
			got := map[string]Enforcement{}
			for _, f := range d.Denials {
				got[f.Source] = f.Enforcement
			}
			if len(got) != len(tc.denials) {
				t.Fatalf("denials: want %v, got %+v", tc.denials, d.Denials)
			}
			for src, e := range tc.denials {
				if got[src] != e {
					t.Errorf("denials of %s: want %s, got %s (%+v)", src, e, got[src], d.Denials)
				}
			}
			if len(d.WouldDeny) != tc.wouldDeny {
				t.Errorf("wouldDeny: want %d, got %q", tc.wouldDeny, d.WouldDeny)
			}
			counted := 0
			for src, e := range tc.denials {
				n := wouldDenyCount(t, reg, "r", src)
				if e != EnforceDeny && n != 1 {
					t.Errorf("qn_admission_would_deny_total{role=r,package=%s}: want 1, got %d", src, n)
				}
				counted += n
			}
			if want := countUnenforced(tc.denials); counted != want {
				t.Errorf("would-deny counted %d times, want %d", counted, want)
			}
			if d.Allowed && d.Window == nil {
				t.Errorf("an admitted request takes its window slot; got no window state")
			}
		})
	}
}

func countUnenforced(m map[string]Enforcement) int {
	n := 0
	for _, e := range m {
		if e != EnforceDeny {
			n++
		}
	}
	return n
}

// wouldDenyCount reads qn_admission_would_deny_total{role,package} from reg.
func wouldDenyCount(t *testing.T, reg *prometheus.Registry, role, pkg string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "qn_admission_would_deny_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["role"] == role && labels["package"] == pkg {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

func TestDryRunPackagesProposeNoPatch(t *testing.T) {
	cases := map[string]struct {
		role, overrides string
		want            []string
	}{
		"an enforcing role patches with every package":               {role: "deny", want: []string{"/metadata/labels/new", "/metadata/labels/old"}},
		"a package in dryrun proposes no patch":                      {role: "deny", overrides: "    packageEnforcement: {new: dryrun}\n", want: []string{"/metadata/labels/old"}},
		"a package in warn mode still patches":                       {role: "deny", overrides: "    packageEnforcement: {new: warn}\n", want: []string{"/metadata/labels/new", "/metadata/labels/old"}},
		"a dryrun role proposes nothing but what a package enforces": {role: "dryrun", overrides: "    packageEnforcement: {old: deny}\n", want: []string{"/metadata/labels/old"}},
		"a dryrun role without overrides proposes nothing":           {role: "dryrun"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, _ := overrideSet(t, tc.role, tc.overrides)
			d := e.Mutate(context.Background(), qnInput("CREATE", goodTiered, ""))
			for _, path := range tc.want {
				if !strings.Contains(string(d.Patch), path) {
					t.Errorf("want a patch of %s, got %s", path, d.Patch)
				}
			}
			if d.PatchOps != len(tc.want) {
				t.Errorf("want %d patch operations, got %d: %s", len(tc.want), d.PatchOps, d.Patch)
			}
		})
	}
}

func TestEnforcementOverridesAreChecked(t *testing.T) {
	base := "defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n"
	cases := map[string]struct{ overrides, want string }{
		"a package the role does not list": {
			overrides: "    packageEnforcement: {q: warn}\n",
			want:      `roles.yaml:6: roles.r.packageEnforcement.q: "q" is not among the role's packages (p); an override of what the role does not run changes nothing`,
		},
		"a pattern the role does not list": {
			overrides: "    patternEnforcement: {p: warn}\n",
			want:      `roles.yaml:6: roles.r.patternEnforcement.p: "p" is not among the role's patterns ()`,
		},
		"an unknown enforcement": {
			overrides: "    packageEnforcement: {p: audit}\n",
			want:      `roles.yaml:6: roles.r.packageEnforcement.p: "audit" is not an enforcement (use deny, warn or dryrun)`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRoleTable(RolesFile, []byte(base+tc.overrides))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}
