package audit

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// TestTheAuditReadsTheInventoryOfTheControllersCache: with the bundled
// qn.nodeclaim on, the background audit flags both of two QuantumNodes
// that claim one Node (admission cannot stop two creates at the same
// moment), each naming the other, and a kind the controller does not
// watch is an error of the rules that read the inventory, not a pass.
func TestTheAuditReadsTheInventoryOfTheControllersCache(t *testing.T) {
	bundled := rego.Bundled()
	fsys := fstest.MapFS{}
	for _, name := range []string{"quantumnode.rego", "nodeclaim.rego", "managed_by.rego", "window.rego", "batch.rego", "realtime.rego"} {
		src, err := fs.ReadFile(bundled, name)
		if err != nil {
			t.Fatal(err)
		}
		fsys[name] = &fstest.MapFile{Data: src}
	}
	roles := func(kinds string) []byte {
		return []byte("defaultRole: default\ninventory:\n" + kinds + "roles:\n  default:\n    operations: [CREATE, UPDATE]\n    packages: [qn.quantumnode, qn.nodeclaim]\n")
	}
	fsys["roles.yaml"] = &fstest.MapFile{Data: roles("  - {apiVersion: qn.dev/v1alpha1, kind: QuantumNode}\n  - {apiVersion: v1, kind: Node}\n")}
	set, err := policies.Load(context.Background(), fsys, policies.LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(name string) *qnv1alpha1.QuantumNode {
		return &qnv1alpha1.QuantumNode{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "edge"},
			Spec: qnv1alpha1.QuantumNodeSpec{NodeName: "worker-1", Hardware: qnv1alpha1.Hardware{Arch: "arm64"},
				Services: []qnv1alpha1.Service{{Name: "mqtt", Port: 8883}}},
		}
	}
	scheme := runtime.NewScheme()
	_ = qnv1alpha1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	first, second := claim("edge-1"), claim("edge-2")
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(first, second, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}).Build()
	inv := &CacheInventory{Reader: reader}
	engine := policies.NewEngine(set, policies.EngineOptions{Inventory: inv})
	inv.Engine = engine

	for _, qn := range []*qnv1alpha1.QuantumNode{first, second} {
		res, err := auditNode(context.Background(), engine, qn)
		if err != nil {
			t.Fatal(err)
		}
		other := map[string]string{"edge-1": "edge/edge-2", "edge-2": "edge/edge-1"}[qn.Name]
		if res.Compliant() || !strings.Contains(strings.Join(res.Violations(), "; "), "already claimed by QuantumNode "+other) {
			t.Errorf("%s: compliant=%v violations %q; want the claim flagged naming %s", qn.Name, res.Compliant(), res.Violations(), other)
		}
	}

	fsys["roles.yaml"] = &fstest.MapFile{Data: roles("  - {apiVersion: qn.dev/v1alpha1, kind: QuantumNode}\n  - {apiVersion: apps/v1, kind: Deployment}\n")}
	set2, err := policies.Load(context.Background(), fsys, policies.LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	engine.Swap(set2)
	res, err := auditNode(context.Background(), engine, first)
	if err != nil {
		t.Fatal(err)
	}
	if res.Count(policies.VerdictError) == 0 || !strings.Contains(strings.Join(res.Violations(), "; "), "keeps no inventory of apps/v1 Deployment") {
		t.Errorf("an inventory kind the controller does not watch: %q, want the rules that read it in error, saying why", res.Violations())
	}
}
