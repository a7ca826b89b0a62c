package inventory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/inventory"
	"github.com/quantumnode/qn-admission/test/harness"
)

// Cost of the inventory, measured (docs/benchmarks.md, "The cluster
// inventory"). Figures are reported as metrics, never asserted.

const (
	benchQuantumNodes = 10_000
	benchNodes        = 5_000
	benchNamespaces   = 100
)

// storedQuantumNode is a QuantumNode as the API server stores it: labels,
// annotations (kubectl's last-applied copy), managedFields, services.
func storedQuantumNode(i int) map[string]any {
	name := fmt.Sprintf("qn-%05d", i)
	obj := map[string]any{"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
		"metadata": map[string]any{"name": name, "namespace": fmt.Sprintf("team-%03d", i%benchNamespaces),
			"labels":      map[string]any{"app.kubernetes.io/name": "edge", "topology.kubernetes.io/zone": "cn-shanghai", "qn.dev/managed-by": "qn-admission"},
			"annotations": map[string]any{"qn-role": "realtime", "qn.dev/latency-budget-ms": "20"}},
		"spec": map[string]any{"nodeName": fmt.Sprintf("worker-%05d", i%benchNodes), "hardware": map[string]any{"arch": "arm64"},
			"services": []any{map[string]any{"name": "mqtt", "port": int64(8883)}, map[string]any{"name": "metrics", "port": int64(9100)}, map[string]any{"name": "grpc", "port": int64(9090)}}},
	}
	spec, _ := json.Marshal(obj)
	obj["metadata"].(map[string]any)["annotations"].(map[string]any)["kubectl.kubernetes.io/last-applied-configuration"] = string(spec)
	return obj
}

// storedNode is a Node as a kubelet keeps it: labels, capacity, images,
// conditions, addresses.
func storedNode(i int) map[string]any {
	var images []any
	for j := range 20 {
		images = append(images, map[string]any{"names": []any{fmt.Sprintf("registry.example/app-%d@sha256:%064d", j, j)}, "sizeBytes": int64(1 << 26)})
	}
	var conditions []any
	for _, c := range []string{"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"} {
		conditions = append(conditions, map[string]any{"type": c, "status": "False", "reason": "Kubelet" + c, "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-11-27T10:00:00Z"})
	}
	return map[string]any{"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": fmt.Sprintf("worker-%05d", i), "labels": map[string]any{"kubernetes.io/arch": "arm64", "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "cn-shanghai"}},
		"status": map[string]any{"capacity": map[string]any{"cpu": "8", "memory": "32Gi"}, "images": images, "conditions": conditions,
			"nodeInfo": map[string]any{"architecture": "arm64", "kubeletVersion": "v1.36.3"}}}
}

func heapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// BenchmarkInventoryMemory is the heap the cluster inventory holds with
// 10,000 QuantumNodes and 5,000 Nodes, kept by the real informers from a
// real API server, pruned to what docs/examples/inventory's policies read
// (QuantumNodes' spec.nodeName, Nodes' names). heap-MiB is after the
// first sync less before the watches began (both after GC).
func BenchmarkInventoryMemory(b *testing.B) {
	_, cfg := harness.ControlPlane(b, harness.ControlPlaneOptions{})
	dyn := newDynamic(b, cfg)
	var wg sync.WaitGroup
	work := make(chan func(), 64)
	for range 16 {
		wg.Go(func() {
			for f := range work {
				f()
			}
		})
	}
	for i := range benchNamespaces {
		create(b, dyn, namespaces, "", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": fmt.Sprintf("team-%03d", i)}})
	}
	start := time.Now()
	for i := range benchNodes {
		work <- func() { create(b, dyn, nodes, "", storedNode(i)) }
	}
	for i := range benchQuantumNodes {
		work <- func() {
			obj := storedQuantumNode(i)
			create(b, dyn, quantumnodes, obj["metadata"].(map[string]any)["namespace"].(string), obj)
		}
	}
	close(work)
	wg.Wait()
	b.Logf("stored %d QuantumNodes and %d Nodes in %s", benchQuantumNodes, benchNodes, time.Since(start).Round(time.Second))

	reads := exampleReads(b)
	for b.Loop() {
		before := heapMiB()
		inv, err := inventory.NewCluster(inventory.ClusterOptions{Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		if err := inv.Ensure([]policies.InventoryKind{{APIVersion: "qn.dev/v1alpha1", Kind: "QuantumNode"}, {APIVersion: "v1", Kind: "Node"}}, reads); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		synced := time.Now()
		go func() { _ = inv.Run(ctx) }()
		for inv.Ready() != nil {
			time.Sleep(10 * time.Millisecond)
		}
		b.ReportMetric(time.Since(synced).Seconds(), "sync-s")
		time.Sleep(300 * time.Millisecond) // the last publish
		after := heapMiB()
		b.ReportMetric(after-before, "heap-MiB")
		runtime.KeepAlive(inv)
		cancel()
	}
}

// BenchmarkValidate is the engine's validation of a QuantumNode CREATE
// against an inventory of 10,000 QuantumNodes and 5,000 Nodes: "plain" is
// a role that does not read it (qn.quantumnode), "claims" one that does
// (qn.quantumnode and qn.nodeclaim), "plain-without-inventory" the plain
// role with no inventory at all.
func BenchmarkValidate(b *testing.B) {
	files := fstest.MapFS{"roles.yaml": {Data: []byte(`defaultRole: plain
inventory:
  - {apiVersion: qn.dev/v1alpha1, kind: QuantumNode}
  - {apiVersion: v1, kind: Node}
roles:
  plain: {operations: [CREATE, UPDATE], packages: [qn.quantumnode]}
  claims: {operations: [CREATE, UPDATE], packages: [qn.quantumnode, qn.nodeclaim]}
`)}}
	for _, f := range []string{"quantumnode.rego", "nodeclaim.rego"} {
		src, err := os.ReadFile(filepath.Join("../../docs/examples/inventory", f))
		if err != nil {
			b.Fatal(err)
		}
		files[f] = &fstest.MapFile{Data: src}
	}
	set, err := policies.Load(context.Background(), files, policies.LoadOptions{SkipTests: true})
	if err != nil {
		b.Fatal(err)
	}
	objects := make([]map[string]any, 0, benchQuantumNodes+benchNodes)
	for i := range benchQuantumNodes {
		objects = append(objects, storedQuantumNode(i))
	}
	for i := range benchNodes {
		objects = append(objects, storedNode(i))
	}
	inv, err := inventory.FromObjects(objects, set.Compiled.InventoryReads())
	if err != nil {
		b.Fatal(err)
	}
	other, err := inventory.FromObjects(objects, set.Compiled.InventoryReads())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name, role string
		inv        policies.Inventory
	}{{"plain-without-inventory", "plain", nil}, {"plain", "plain", inv}, {"claims", "claims", inv}, {"claims-new-inventory-each-request", "claims", &alternating{a: inv, b: other}}} {
		b.Run(tc.name, func(b *testing.B) {
			engine := policies.NewEngine(set, policies.EngineOptions{Inventory: tc.inv})
			in := benchRequest(b, tc.role)
			b.ReportAllocs()
			for b.Loop() {
				if d := engine.Validate(context.Background(), in); !d.Allowed {
					b.Fatalf("denied: %s", d.Message)
				}
			}
		})
	}
}

// benchRequest is the CREATE of a QuantumNode claiming a free Node.
func benchRequest(b *testing.B, role string) *policies.Input {
	obj := storedQuantumNode(benchQuantumNodes + 1)
	obj["metadata"].(map[string]any)["annotations"] = map[string]any{"qn-role": role}
	obj["spec"].(map[string]any)["nodeName"] = "worker-free"
	raw, err := json.Marshal(obj)
	if err != nil {
		b.Fatal(err)
	}
	u := unstructured.Unstructured{Object: obj}
	return &policies.Input{
		Request: &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: u.GetNamespace(), Name: u.GetName(),
			Kind:     metav1.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"},
			Resource: metav1.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"},
			UserInfo: authenticationv1.UserInfo{Username: "alice"}, Object: k8sruntime.RawExtension{Raw: raw}},
		Object: obj,
		Facts: policies.Facts{Operation: "CREATE", Namespace: u.GetNamespace(), Name: u.GetName(), User: "alice", Role: role,
			Kind: policies.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"}, Annotations: u.GetAnnotations(), Labels: u.GetLabels()},
	}
}

// alternating answers two documents in turn: every request sees a newly
// published inventory, so the claims index is built at every request (its
// cost once per publish).
type alternating struct {
	a, b policies.Inventory
	n    int
}

func (x *alternating) Document() (ast.Object, error) {
	x.n++
	if x.n%2 == 0 {
		return x.a.Document()
	}
	return x.b.Document()
}
