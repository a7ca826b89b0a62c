package rego

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// inventoryOf is an inventory document with one stored QuantumNode
// claiming worker-1 and the Nodes worker-1 and worker-2.
func testInventory(t *testing.T) ast.Object {
	t.Helper()
	v := ast.MustParseTerm(`{
		"cluster": {"v1": {"Node": {"worker-1": {"metadata": {"name": "worker-1"}}, "worker-2": {"metadata": {"name": "worker-2"}}}}},
		"namespace": {"edge": {"qn.dev/v1alpha1": {"QuantumNode": {"edge-1": {"metadata": {"name": "edge-1"}, "spec": {"nodeName": "worker-1"}}}}}}
	}`).Value
	return v.(ast.Object)
}

func claimInput(t *testing.T, node string) ast.Value {
	return mustInput(t, `{"request": {"kind": {"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"}, "operation": "CREATE", "namespace": "lab", "name": "lab-1",
		"object": {"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": {"name": "lab-1", "namespace": "lab"},
		"spec": {"nodeName": "`+node+`", "hardware": {"arch": "arm64"}, "services": [{"name": "mqtt", "port": 8883}]}}}}`)
}

// compileExample compiles docs/examples/inventory, whose qn.nodeclaim
// reads the inventory.
func compileExample(t *testing.T) *Compiled {
	t.Helper()
	mods, err := ReadModules(os.DirFS("../docs/examples/inventory"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(mods, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInventoryReachesEveryEvaluation(t *testing.T) {
	c := compileExample(t)
	q, err := c.Prepare(context.Background(), []string{"qn.quantumnode", "qn.nodeclaim"}, ValidationRules, 0)
	if err != nil {
		t.Fatal(err)
	}
	if planned, why := q.Planned(); !planned {
		t.Fatalf("the claim rules are not planned: %s", why)
	}
	claimed := `spec.nodeName "worker-1" is already claimed by QuantumNode edge/edge-1; a Node backs one QuantumNode (pick another Node, or free it first)`
	missing := `spec.nodeName "worker-9" names no Node in the cluster (yet); the QuantumNode stays Pending until that Node registers`
	ctx := WithInventory(context.Background(), testInventory(t))
	cases := map[string]struct {
		ctx        context.Context
		node       string
		deny, warn []string
	}{
		"a claimed Node is denied, naming the claimant": {ctx: ctx, node: "worker-1", deny: []string{claimed}},
		"a free Node is admitted":                       {ctx: ctx, node: "worker-2"},
		"a missing Node is a warning":                   {ctx: ctx, node: "worker-9", warn: []string{missing}},
		"without an inventory the rules say nothing":    {ctx: context.Background(), node: "worker-1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := claimInput(t, tc.node)
			planned, err := q.Eval(tc.ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			timed, _, err := q.EvalTimed(tc.ctx, in) // topdown, directly
			if err != nil {
				t.Fatal(err)
			}
			js, _ := ast.JSON(in)
			reference, err := q.EvalReference(tc.ctx, js) // rego's prepared query
			if err != nil {
				t.Fatal(err)
			}
			for how, res := range map[string]Result{"planned": planned, "topdown": timed, "reference": reference} {
				if !slices.Equal(res.Deny, tc.deny) || !slices.Equal(res.Warn, tc.warn) {
					t.Errorf("%s: deny %q warn %q, want deny %q warn %q", how, res.Deny, res.Warn, tc.deny, tc.warn)
				}
			}
		})
	}
}

func TestOnlyQueriesThatReadTheInventoryAreGivenIt(t *testing.T) {
	c := compileExample(t)
	cases := map[string]struct {
		packages []string
		want     bool
	}{
		"the claim rules read it":      {[]string{"qn.nodeclaim"}, true},
		"a role with them reads it":    {[]string{"qn.quantumnode", "qn.nodeclaim"}, true},
		"the QuantumNode rules do not": {[]string{"qn.quantumnode"}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q, err := c.Prepare(context.Background(), tc.packages, ValidationRules, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := q.ReadsInventory(); got != tc.want {
				t.Errorf("ReadsInventory = %v, want %v", got, tc.want)
			}
		})
	}
	dyn, err := Compile([]Module{{Path: "d.rego", Source: "package d\ndeny contains k if { some k; data[k].x }\n"}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := dyn.Prepare(context.Background(), []string{"d"}, ValidationRules, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !q.ReadsInventory() {
		t.Error("a rule reading data[k] may read data.inventory; it must be given it")
	}
}

func TestInventoryReadsAreTheFieldsPoliciesRead(t *testing.T) {
	cases := map[string]struct {
		source   string
		gv, kind string
		want     [][]string
	}{
		"the bundled claim rules read spec.nodeName of QuantumNodes": {
			gv: "qn.dev/v1alpha1", kind: "QuantumNode", want: [][]string{{"spec", "nodeName"}}},
		"and only that Nodes exist": {
			gv: "v1", kind: "Node", want: [][]string{{"metadata", "name"}}},
		"a field read through a variable": {
			source: "package p\ndeny contains n if { some n; o := data.inventory.cluster.v1.Node[n]; o.metadata.labels.zone == \"a\" }\n",
			gv:     "v1", kind: "Node", want: [][]string{{"metadata", "labels", "zone"}}},
		"an object passed whole reads everything": {
			source: "package p\ndeny contains n if { some n; o := data.inventory.cluster.v1.Node[n]; json.marshal(o) == \"\" }\n",
			gv:     "v1", kind: "Node", want: [][]string{{}}},
		"a kind chosen by a variable counts for every kind": {
			source: "package p\ndeny contains n if { some k, n; data.inventory.cluster.v1[k][n].spec.x }\n",
			gv:     "v1", kind: "Secret", want: [][]string{{"spec", "x"}}},
		"a kind nobody reads has no fields": {
			gv: "v1", kind: "Secret"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := compileExample(t)
			if tc.source != "" {
				var err error
				if c, err = Compile([]Module{{Path: "p.rego", Source: tc.source}}, nil, CompileOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got := c.InventoryReads().Fields(tc.gv, tc.kind)
			if !slices.EqualFunc(slices.CompactFunc(got, slices.Equal), tc.want, slices.Equal) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("Fields(%s, %s) = %q, want %q", tc.gv, tc.kind, got, tc.want)
			}
		})
	}
}

func TestASetMayNotDefineTheInventory(t *testing.T) {
	_, err := Compile([]Module{{Path: "inv.rego", Source: "package inventory.mine\nx := 1\n"}}, nil, CompileOptions{})
	if err == nil || !containsAll(err.Error(), "inv.rego:1", "reserved") {
		t.Errorf("a package under data.inventory: %v, want an error at inv.rego:1 saying it is reserved", err)
	}
	_, err = Compile(nil, map[string]any{"inventory": 1}, CompileOptions{})
	if err == nil || !containsAll(err.Error(), "reserved") {
		t.Errorf("a data member inventory: %v, want it refused as reserved", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestAnIndexOfTheInventoryIsKeptAcrossEvaluations(t *testing.T) {
	c := compileExample(t)
	cases := map[string]bool{
		"g0.data.qn.nodeclaim.claims":        true,  // reads the inventory alone
		"g0.data.qn.nodeclaim.claimants":     false, // reads the request
		"g0.data.qn.nodeclaim.node":          false,
		"g0.data.qn.quantumnode.judged":      false, // does not read the inventory
		"g0.data.qn.nodeclaim.no_such":       false,
		"not a planned function name at all": false,
	}
	for name, want := range cases {
		if got := c.sharedRule(name); got != want {
			t.Errorf("sharedRule(%s) = %v, want %v", name, got, want)
		}
	}
	timed, err := Compile([]Module{{Path: "t.rego", Source: "package t\nstamped[k] := time.now_ns() if { some k; data.inventory.cluster.v1.Node[k] }\n"}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if timed.sharedRule("g0.data.t.stamped") {
		t.Error("a rule calling time.now_ns must be evaluated afresh each time")
	}

	// The kept value follows the inventory: a new document is a new index.
	q, err := c.Prepare(context.Background(), []string{"qn.quantumnode", "qn.nodeclaim"}, ValidationRules, 0)
	if err != nil {
		t.Fatal(err)
	}
	in := claimInput(t, "worker-2")
	for i, doc := range []string{
		`{"cluster": {}, "namespace": {}}`,
		`{"cluster": {}, "namespace": {"edge": {"qn.dev/v1alpha1": {"QuantumNode": {"edge-2": {"spec": {"nodeName": "worker-2"}}}}}}}`,
		`{"cluster": {}, "namespace": {}}`,
	} {
		res, err := q.Eval(WithInventory(context.Background(), ast.MustParseTerm(doc).Value.(ast.Object)), in)
		if err != nil {
			t.Fatal(err)
		}
		if denied := len(res.Deny) > 0; denied != (i == 1) {
			t.Errorf("inventory %d: deny %q", i, res.Deny)
		}
	}
}
