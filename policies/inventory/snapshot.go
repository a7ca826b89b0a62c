package inventory

import (
	"fmt"
	"os"

	"github.com/open-policy-agent/opa/v1/ast"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/rego"
)

// Snapshot is a fixed inventory, from a file: qnctl judges requests
// against it as qn-webhook judges them against the cluster.
type Snapshot struct{ doc ast.Object }

// Document is the snapshot's document; it is never stale.
func (s *Snapshot) Document() (ast.Object, error) { return s.doc, nil }

// LoadSnapshot reads a List of objects (kubectl get -o yaml|json: a List
// with items, or a single object) into an inventory holding what reads
// says policies read. An object with metadata.namespace is namespaced; a
// kind with an object without one is cluster-scoped (kubectl writes no
// namespace for those).
func LoadSnapshot(path string, reads rego.InventoryReads) (*Snapshot, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("inventory %s: %w", path, err)
	}
	items := []any{doc}
	if list, ok := doc["items"].([]any); ok {
		items = list
	}
	objects := make([]map[string]any, 0, len(items))
	for i, it := range items {
		obj, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("inventory %s: items[%d] is not an object", path, i)
		}
		objects = append(objects, obj)
	}
	return FromObjects(objects, reads)
}

// FromObjects is the inventory of objects, pruned to what reads says.
func FromObjects(objects []map[string]any, reads rego.InventoryReads) (*Snapshot, error) {
	d := newDocument()
	for i, obj := range objects {
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		namespace, _ := meta["namespace"].(string)
		if apiVersion == "" || kind == "" || name == "" {
			return nil, fmt.Errorf("inventory: object %d has no apiVersion, kind or metadata.name", i)
		}
		t, err := term(prune(obj, reads.Fields(apiVersion, kind)))
		if err != nil {
			return nil, fmt.Errorf("inventory: %s %s: %w", kind, name, err)
		}
		if namespace == "" {
			d.clusterKinds[leafKey{groupVersion: apiVersion, kind: kind}] = true
		}
		d.put(namespace, apiVersion, kind, name, t)
	}
	d.publish()
	return &Snapshot{doc: d.published}, nil
}
