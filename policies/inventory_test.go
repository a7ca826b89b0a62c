package policies

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestInventoryDeclarationErrorsNameTheLine(t *testing.T) {
	base := "defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n"
	cases := map[string]struct {
		inventory string
		want      string
	}{
		"a plural resource name instead of a kind": {
			inventory: "inventory:\n  - {apiVersion: v1, kind: Node}\n  - {apiVersion: v1, kind: nodes}\n",
			want:      `roles.yaml:8: inventory[1]: kind "nodes" is not a kind name (CamelCase, singular: Node, not nodes)`,
		},
		"a missing apiVersion": {
			inventory: "inventory:\n  - kind: Node\n",
			want:      "roles.yaml:7: inventory[0]: apiVersion is missing (e.g. v1 or qn.dev/v1alpha1)",
		},
		"a malformed apiVersion": {
			inventory: "inventory:\n  - {apiVersion: qn.dev, kind: QuantumNode}\n",
			want:      `roles.yaml:7: inventory[0]: apiVersion "qn.dev" is not group/version`,
		},
		"an unknown field in an entry": {
			inventory: "inventory:\n  - apiVersion: v1\n    kind: Node\n    namespace: x\n",
			want:      `roles.yaml:9: inventory[0]: unknown field "namespace" (known here: apiVersion, kind)`,
		},
		"a kind listed twice": {
			inventory: "inventory:\n  - {apiVersion: v1, kind: Node}\n  - {apiVersion: v1, kind: Node}\n",
			want:      "roles.yaml:8: inventory[1]: v1 Node is already listed at line 7",
		},
		"not a list": {
			inventory: "inventory: {apiVersion: v1, kind: Node}\n",
			want:      "roles.yaml:6: cannot unmarshal !!map into []policies.InventoryKind",
		},
		"Secrets": {
			inventory: "inventory:\n  - {apiVersion: v1, kind: Secret}\n",
			want:      "roles.yaml:7: inventory[0]: Secrets are not kept in the inventory",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRoleTable(RolesFile, []byte(base+tc.inventory))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
	table, err := ParseRoleTable(RolesFile, []byte(base+"inventory:\n  - {apiVersion: qn.dev/v1alpha1, kind: QuantumNode}\n  - {apiVersion: v1, kind: Node}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(table.Inventory) != 2 || table.Inventory[1].String() != "v1 Node" || table.Inventory[1].Line != 8 {
		t.Errorf("inventory = %+v, want QuantumNode and Node (at line 8)", table.Inventory)
	}
}

// fixedInventory is an inventory that answers a document or an error.
type fixedInventory struct {
	doc ast.Object
	err error
}

func (f fixedInventory) Document() (ast.Object, error) { return f.doc, f.err }

func claimSet(t *testing.T, onError string) *Set {
	t.Helper()
	fsys := fstest.MapFS{
		"roles.yaml": {Data: []byte("defaultRole: r\ninventory: [{apiVersion: v1, kind: Node}]\nroles:\n  r:\n    operations: [CREATE]\n    onError: " + onError + "\n    packages: [p]\n  plain:\n    operations: [CREATE]\n    packages: [q]\n")},
		"p.rego": {Data: []byte(`package p
deny contains "no such Node" if {
	not data.inventory.cluster.v1.Node[input.request.object.spec.nodeName]
}
`)},
		"q.rego": {Data: []byte("package q\ndeny contains \"never\" if false\n")},
	}
	set, err := Load(context.Background(), fsys, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestAStaleInventoryFollowsTheRolesOnError(t *testing.T) {
	doc := ast.MustParseTerm(`{"cluster": {"v1": {"Node": {"worker-1": {"metadata": {"name": "worker-1"}}}}}, "namespace": {}}`).Value.(ast.Object)
	node := func(name string) *Input {
		return qnInput("CREATE", `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1"},"spec":{"nodeName":"`+name+`"}}`, "")
	}
	stale := errors.New("the inventory is 3m0s behind the API server")
	cases := map[string]struct {
		onError string
		inv     Inventory
		node    string
		allowed bool
		code    int32
		message string
	}{
		"a fresh inventory judges":             {onError: "deny", inv: fixedInventory{doc: doc}, node: "worker-1", allowed: true},
		"and refuses what it must":             {onError: "deny", inv: fixedInventory{doc: doc}, node: "worker-2", code: 403, message: "no such Node"},
		"a stale one fails closed under deny":  {onError: "deny", inv: fixedInventory{err: stale}, node: "worker-1", code: 500, message: "3m0s behind"},
		"and open under allow, with a warning": {onError: "allow", inv: fixedInventory{err: stale}, node: "worker-2", allowed: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := NewEngine(claimSet(t, tc.onError), EngineOptions{Inventory: tc.inv})
			d := e.Validate(context.Background(), node(tc.node))
			if d.Allowed != tc.allowed || (!tc.allowed && d.Code != tc.code) || !strings.Contains(d.Message+strings.Join(d.Warnings, ";"), tc.message) {
				t.Fatalf("got %+v, want allowed=%v code %d mentioning %q", d, tc.allowed, tc.code, tc.message)
			}
			if tc.inv.(fixedInventory).err != nil && tc.allowed && !strings.Contains(strings.Join(d.Warnings, ";"), "cluster inventory") {
				t.Errorf("warnings %q do not say the inventory could not be used", d.Warnings)
			}
		})
	}
	t.Run("a role that does not read it never asks", func(t *testing.T) {
		e := NewEngine(claimSet(t, "deny"), EngineOptions{Inventory: fixedInventory{err: stale}})
		in := node("worker-1")
		in.Facts.Role = "plain"
		in.Object["metadata"].(map[string]any)["annotations"] = map[string]any{RoleAnnotation: "plain"}
		if d := e.Validate(context.Background(), in); !d.Allowed {
			t.Fatalf("got %+v, want the plain role's answer, untouched by the stale inventory", d)
		}
	})
}
