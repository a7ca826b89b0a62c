package inventory_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/inventory"
	"github.com/quantumnode/qn-admission/rego"
	"github.com/quantumnode/qn-admission/test/harness"
)

var (
	nodes        = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	quantumnodes = schema.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"}
	namespaces   = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// exampleReads is what docs/examples/inventory's policies read.
func exampleReads(t testing.TB) rego.InventoryReads {
	t.Helper()
	mods, err := rego.ReadModules(os.DirFS("../../docs/examples/inventory"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := rego.Compile(mods, nil, rego.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c.InventoryReads()
}

func newDynamic(t testing.TB, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 2000, 2000
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func create(t testing.TB, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, obj map[string]any) {
	t.Helper()
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func quantumNode(name, node string) map[string]any {
	return map[string]any{"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"team": "a"}},
		"spec":     map[string]any{"nodeName": node, "hardware": map[string]any{"arch": "arm64"}, "services": []any{map[string]any{"name": "mqtt", "port": int64(8883)}}}}
}

// eventually waits up to 10 s until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, what, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

func TestTheInventoryFollowsTheAPIServer(t *testing.T) {
	env, cfg := harness.ControlPlane(t, harness.ControlPlaneOptions{})
	dyn := dynamic.NewForConfigOrDie(cfg)
	create(t, dyn, namespaces, "", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "edge"}})
	create(t, dyn, nodes, "", map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "worker-1", "labels": map[string]any{"zone": "a"}}})
	create(t, dyn, quantumnodes, "edge", quantumNode("edge-1", "worker-1"))

	inv, err := inventory.NewCluster(inventory.ClusterOptions{Config: cfg, MaxLag: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kinds := []policies.InventoryKind{{APIVersion: "qn.dev/v1alpha1", Kind: "QuantumNode", Line: 3}, {APIVersion: "v1", Kind: "Node", Line: 4}}
	if err := inv.Ensure(kinds, exampleReads(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Document(); err == nil || !strings.Contains(err.Error(), "has not synced") {
		t.Fatalf("before its first sync the inventory must not be read, got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = inv.Run(ctx) }()
	eventually(t, "the first sync", func() bool { return inv.Ready() == nil })

	doc, err := inv.Document()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cluster": {"v1": {"Node": {"worker-1": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}}}}},
		"namespace": {"edge": {"qn.dev/v1alpha1": {"QuantumNode": {"edge-1": {"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": {"name": "edge-1", "namespace": "edge"}, "spec": {"nodeName": "worker-1"}}}}}}}`
	if doc.Compare(ast.MustParseTerm(want).Value) != 0 {
		t.Fatalf("inventory\n%v\nwant only the fields the policies read\n%v", doc, want)
	}

	create(t, dyn, quantumnodes, "edge", quantumNode("edge-2", "worker-2"))
	eventually(t, "edge-2 in the inventory", func() bool {
		doc, err := inv.Document()
		return err == nil && doc.Get(ast.StringTerm("namespace")).Get(ast.StringTerm("edge")).Get(ast.StringTerm("qn.dev/v1alpha1")).Get(ast.StringTerm("QuantumNode")).Get(ast.StringTerm("edge-2")) != nil
	})
	if err := dyn.Resource(quantumnodes).Namespace("edge").Delete(context.Background(), "edge-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "edge-1 gone from the inventory", func() bool {
		doc, err := inv.Document()
		return err == nil && doc.Get(ast.StringTerm("namespace")).Get(ast.StringTerm("edge")).Get(ast.StringTerm("qn.dev/v1alpha1")).Get(ast.StringTerm("QuantumNode")).Get(ast.StringTerm("edge-1")) == nil
	})
	if lag := inv.Lag(); lag > time.Second {
		t.Errorf("lag %s of a healthy inventory", lag)
	}

	err = inv.Ensure(append(kinds, policies.InventoryKind{APIVersion: "example.com/v1", Kind: "Widget", Line: 9}), exampleReads(t))
	if err == nil || !strings.Contains(err.Error(), "roles.yaml:9: inventory kind example.com/v1 Widget: the API server does not serve it") {
		t.Errorf("a kind the API server does not serve: %v, want it named at its line", err)
	}
	if d := inv.Detail(); !strings.Contains(d, "v1 Node: 1 (synced") || !strings.Contains(d, "QuantumNode: 1 (synced") {
		t.Errorf("the kinds that exist must go on being watched: %s", d)
	}
	if err := inv.Ready(); err == nil || !strings.Contains(err.Error(), "roles.yaml:9") {
		t.Errorf("Ready with a declared kind not served: %v, want it named", err)
	}
	if _, err := inv.Document(); err == nil || !strings.Contains(err.Error(), "roles.yaml:9") {
		t.Errorf("policies read an inventory that lacks a declared kind: %v, want the error naming it", err)
	}
	if err := inv.Ensure(kinds, exampleReads(t)); err != nil {
		t.Fatal(err)
	}

	// The API server goes away: past MaxLag policies may not read the
	// inventory, and the strict check says why.
	// (Stop may time out waiting for the watches to drain; the process is
	// gone either way.)
	_ = env.ControlPlane.APIServer.Stop()
	eventually(t, "the inventory to be stale", func() bool {
		_, err := inv.Document()
		return err != nil && strings.Contains(err.Error(), "behind the API server")
	})
	if err := inv.Strict(context.Background()); err == nil || !strings.Contains(err.Error(), "watch of") {
		t.Errorf("strict check of a stale inventory: %v, want it to name the broken watch", err)
	}
}
