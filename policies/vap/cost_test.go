package vap_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/admission"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/quantumnode/qn-admission/policies/vap"
)

// boundsTable is a role table at every limit of the QuantumNodeRoleTable
// schema, each name at its longest: 64 roles, 64 users and service
// accounts and 64 groups in each requesters and delete list, half of them
// prefixes, 63 entries in each moveTo, 64 exemptions of each kind. The
// policy's CEL walks these lists, so this is the costliest table that
// compiles.
func boundsTable() string {
	long := func(prefix string, i, n int) string {
		s := fmt.Sprintf("%s-%02d-", prefix, i)
		return s + strings.Repeat("x", n-len(s))
	}
	subjects := func(indent, role string) string {
		var users, groups []string
		for i := range 48 {
			u := long("user-"+role, i, 253)
			if i%2 == 1 {
				u = u[:252] + "*"
			}
			users = append(users, u)
		}
		var sas []string
		for i := range 16 {
			sas = append(sas, fmt.Sprintf("ns-%02d:%s", i, long("sa-"+role, i, 240)))
		}
		for i := range 64 {
			g := long("group-"+role, i, 253)
			if i%2 == 1 {
				g = g[:252] + "*"
			}
			groups = append(groups, g)
		}
		return fmt.Sprintf("%susers: [%s]\n%sserviceAccounts: [%s]\n%sgroups: [%s]\n",
			indent, quoted(users), indent, quoted(sas), indent, quoted(groups))
	}
	var roles []string
	for i := range 64 {
		roles = append(roles, fmt.Sprintf("r%02d", i))
	}
	var b strings.Builder
	b.WriteString("defaultRole: r00\nexemptions:\n")
	var users, groups, namespaces []string
	for i := range 64 {
		users = append(users, long("exempt-user", i, 253))
		groups = append(groups, long("exempt-group", i, 253)[:252]+"*")
		namespaces = append(namespaces, long("exempt-ns", i, 63))
	}
	fmt.Fprintf(&b, "  users: [%s]\n  groups: [%s]\n  namespaces: [%s]\nroles:\n", quoted(users), quoted(groups), quoted(namespaces))
	for i, r := range roles {
		var moveTo []string
		for j, other := range roles {
			if j != i {
				moveTo = append(moveTo, other)
			}
		}
		fmt.Fprintf(&b, "  %s:\n    operations: [CREATE, UPDATE, DELETE]\n    requesters:\n%s    delete:\n%s    moveTo: [%s]\n    packages: [qn.quantumnode]\n",
			r, subjects("      ", r), subjects("      ", r), strings.Join(moveTo, ", "))
	}
	return b.String()
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// groupsOf is a requester's groups: system:authenticated and n more of
// size characters that no role table names.
func groupsOf(n, size int) []string {
	groups := []string{"system:authenticated"}
	for i := range n {
		g := fmt.Sprintf("team-%05d-", i)
		groups = append(groups, g+strings.Repeat("g", max(0, size-len(g))))
	}
	return groups
}

// compileTable compiles the bundled policies with roles.yaml replaced (the
// bundled one when empty) for the API server's CEL.
func compileTable(t *testing.T, roles string) (*apiServerPolicy, int) {
	t.Helper()
	files := map[string]string{}
	if roles != "" {
		files["roles.yaml"] = roles
	}
	compiled, err := vap.Compile(load(t, policyDir(t, files)), vap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, problems := compileForAPIServer(t, compiled, environment.DefaultCompatibilityVersion(), environment.StoredExpressions)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return p, len(compiled.Params.Spec.Roles)
}

// What a request costs the policy's CEL in the API server. The API server
// estimates no static cost for a ValidatingAdmissionPolicy (it does for a
// CRD's rules, config/crd); at run time it charges each request against
// celconfig.RuntimeCELCostBudget (10 M units) and fails an expression past
// celconfig.PerCallLimit (1 M). A failed expression fails the policy, and
// its failurePolicy (Ignore) admits: the webhook alone judges that
// request. The cost grows with the requester's groups times the entries of
// the role's requesters or delete list (a requester matching no entry
// walks them all); it does not grow with the length of the names.
// docs/policies.md quotes these figures.
func TestWhatARequestCostsThePolicysCEL(t *testing.T) {
	bundled, _ := compileTable(t, "")
	bounds, roles := compileTable(t, boundsTable())
	if roles != 64 {
		t.Fatalf("the table at the limits compiled %d roles, want 64", roles)
	}
	many := groupsOf(2000, 253)
	under := func(role string) map[string]string { return map[string]string{"qn-role": role} }
	realtimeNode := node("edge-1", map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "20"}, map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"})
	for _, c := range []struct {
		table  string
		policy *apiServerPolicy
		name   string
		r      request
	}{
		{"bundled", bundled, "an admitted realtime create", request{op: admission.Create, user: "carol", groups: groupsOf(2, 20), namespace: "edge", object: realtimeNode}},
		{"bundled", bundled, "a refused move out of realtime", request{op: admission.Update, user: "bob", groups: groupsOf(2, 20), namespace: "edge", object: node("edge-1", nil, nil), old: realtimeNode}},
		{"bundled", bundled, "a refused realtime delete by a requester in 2,000 groups", request{op: admission.Delete, user: "bob", groups: many, namespace: "edge", old: realtimeNode}},
		{"bundled", bundled, "a refused realtime create by a requester in 2,000 groups", request{op: admission.Create, user: "bob", groups: many, namespace: "edge",
			object: node("edge-1", map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "80"}, map[string]string{"topology.kubernetes.io/zone": "eu-west-1"})}},
		{"at every limit", bounds, "a create under the last role by a requester in 100 groups", request{op: admission.Create, user: "mallory", groups: groupsOf(100, 253), namespace: "edge", object: node("edge-1", under("r63"), nil)}},
		{"at every limit", bounds, "a move from the first role to the last, 100 groups", request{op: admission.Update, user: "mallory", groups: groupsOf(100, 253), namespace: "edge",
			object: node("edge-1", under("r63"), nil), old: node("edge-1", under("r00"), nil)}},
		{"at every limit", bounds, "a create under an unknown role, 2,000 groups", request{op: admission.Create, user: "mallory", groups: many, namespace: "edge", object: node("edge-1", under("r64"), nil)}},
	} {
		validations, messages, err := c.policy.runtimeCost(c.r)
		if err != nil {
			t.Errorf("%s table, %s: %v", c.table, c.name, err)
			continue
		}
		t.Logf("%s table, %s: validations %d + messages %d = %d units (budget %d per request, %d per expression)",
			c.table, c.name, validations, messages, validations+messages, celconfig.RuntimeCELCostBudget, celconfig.PerCallLimit)
		if validations+messages > celconfig.RuntimeCELCostBudget/4 {
			t.Errorf("%s table, %s: %d units, over a quarter of the API server's budget", c.table, c.name, validations+messages)
		}
	}

	// Where the costliest table meets the per-call limit: a requester
	// matching none of 64 groups and group prefixes is checked against
	// them once per group.
	create := func(groups int) request {
		return request{op: admission.Create, user: "mallory", groups: groupsOf(groups, 64), namespace: "edge", object: node("edge-1", under("r63"), nil)}
	}
	at100, _, err100 := bounds.runtimeCost(create(100))
	at200, _, err200 := bounds.runtimeCost(create(200))
	if err100 != nil || err200 != nil {
		t.Fatal(err100, err200)
	}
	perGroup := (at200 - at100) / 100
	largest := 0
	for n := 100; ; n += 25 {
		_, _, err := bounds.runtimeCost(create(n))
		if err != nil {
			if !strings.Contains(err.Error(), "cost limit exceeded") {
				t.Fatalf("%d groups: want the per-call cost limit, got %v", n, err)
			}
			break
		}
		largest = n
	}
	t.Logf("at every limit of the table: %d units per group of the requester; up to %d groups stay within the per-call limit of %d", perGroup, largest, celconfig.PerCallLimit)
	if largest < 900 {
		t.Errorf("a requester in %d groups already exceeds the per-call limit against the costliest table; docs/policies.md says about 950", largest+25)
	}
}
