package policies

import (
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/policies/window"
)

func TestRoleTableErrorsNameFileLineAndField(t *testing.T) {
	base := `defaultRole: rt
roles:
  rt:
    operations: [CREATE]
    window: {limit: 120, period: 60s}
    packages: [p]
`
	cases := map[string]struct {
		src  string
		want string
	}{
		"an unknown top-level field": {
			src:  base + "exemption: {}\n",
			want: "roles.yaml:7: exemption: unknown field (known here: defaultRole, exemptions, roles, inventory)",
		},
		"an unknown field inside a window": {
			src:  strings.Replace(base, "limit: 120", "limt: 120", 1),
			want: "roles.yaml:5: roles.rt.window.limt: unknown field (known here: limit, period, key, onStoreError, kinds)",
		},
		"an unknown exemption kind": {
			src:  base + "exemptions:\n  serviceAccounts: [x]\n",
			want: "roles.yaml:8: exemptions.serviceAccounts: unknown field (known here: users, groups, namespaces)",
		},
		"a bad duration": {
			src:  strings.Replace(base, "60s", "60", 1),
			want: `roles.yaml:5: roles.rt.window.period: "60" is not a positive duration (write e.g. 60s or 1m)`,
		},
		"a limit of 0": {
			src:  strings.Replace(base, "limit: 120", "limit: 0", 1),
			want: "roles.yaml:5: roles.rt.window.limit: 0 admits nothing; use a positive number of changes per period (remove window for no limit)",
		},
		"a limit that is not a number": {
			src:  strings.Replace(base, "limit: 120", "limit: many", 1),
			want: "roles.yaml:",
		},
		"a window key that does not exist": {
			src:  strings.Replace(base, "period: 60s", "period: 60s, key: pod", 1),
			want: `roles.yaml:5: roles.rt.window.key: "pod" is not a window key (use user, namespace or role)`,
		},
		"an onStoreError that does not exist": {
			src:  strings.Replace(base, "period: 60s", "period: 60s, onStoreError: open", 1),
			want: `roles.yaml:5: roles.rt.window.onStoreError: "open" is not an onStoreError (use failOpen or failClosed)`,
		},
		"an onStoreError in the wrong case": {
			src:  strings.Replace(base, "    window: {limit: 120, period: 60s}\n", "    window:\n      limit: 120\n      period: 60s\n      onStoreError: FailClosed\n", 1),
			want: `roles.yaml:8: roles.rt.window.onStoreError: "FailClosed" is not an onStoreError (use failOpen or failClosed)`,
		},
		"missing packages": {
			src:  strings.Replace(base, "    packages: [p]\n", "", 1),
			want: "roles.yaml:3: roles.rt.packages: list at least one Rego package (e.g. qn.quantumnode), pattern policy (patterns: [name]) or policy (policies: [name])",
		},
		"an unknown enforcement": {
			src:  base + "    enforcement: audit\n",
			want: `roles.yaml:7: roles.rt.enforcement: "audit" is not an enforcement (use deny, warn or dryrun)`,
		},
		"an unknown onError": {
			src:  base + "    onError: retry\n",
			want: `roles.yaml:7: roles.rt.onError: "retry" is not an onError (use deny or allow)`,
		},
		"no default role": {
			src:  strings.Replace(base, "defaultRole: rt\n", "", 1),
			want: "roles.yaml:1: defaultRole: name the role for requests without a qn-role annotation (one of rt)",
		},
		"YAML that does not parse": {
			src:  "roles: [\n",
			want: "roles.yaml:1: did not find expected node content",
		},
		"an empty file": {
			src:  "",
			want: "roles.yaml:1: roles: the file is empty",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRoleTable("roles.yaml", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestRoleTableDefaults(t *testing.T) {
	tbl, err := ParseRoleTable("roles.yaml", []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    window: {limit: 3, period: 1m}\n    packages: [p]\n    parameters: {zones: [a], nested: {deep: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := tbl.Roles["r"]
	if r.Enforcement != EnforceDeny || r.OnError != OnErrorDeny || r.Window.Key != KeyUser || r.Window.Period != time.Minute || r.Window.Limit != 3 {
		t.Fatalf("defaults not applied: %+v window %+v", r, r.Window)
	}
	if r.Window.OnStoreError != window.FailOpen {
		t.Fatalf("onStoreError defaults to %q, want failOpen", r.Window.OnStoreError)
	}
	if r.Parameters["nested"].(map[string]any)["deep"] != 1 {
		t.Fatalf("parameters are free-form and kept: %v", r.Parameters)
	}
}

func TestRoleTableLine(t *testing.T) {
	table, err := ParseRoleTable(RolesFile, []byte("defaultRole: a\nroles:\n  a:\n    operations: [CREATE]\n    packages: [p]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"defaultRole": 1, "roles.a": 3, "roles.a.packages": 5, "roles.a.window": 3, "roles.b": 2} {
		if got := table.Line(path); got != want {
			t.Errorf("%s: line %d, want %d", path, got, want)
		}
	}
	if (&RoleTable{}).Line("roles") != 0 {
		t.Error("a table not parsed from a file should give 0")
	}
}
