package audit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/inventory"
)

// DefaultInventoryMaxAge is how long the background audit reuses one
// inventory document: the audit judges every stored node, and building
// the document reads every QuantumNode.
const DefaultInventoryMaxAge = 10 * time.Second

// CacheInventory is the cluster inventory the background audit's policies
// read as data.inventory: the QuantumNodes and Nodes of qn-controller's
// own cache (it watches both), pruned to what the policies read as
// qn-webhook prunes them, built again at most once per MaxAge or when the
// policy revision changes. A declared kind qn-controller does not watch
// makes the rules that read the inventory fail, said by their audit
// result: it has no list or watch right on other kinds.
type CacheInventory struct {
	// Reader is the manager's cache.
	Reader client.Reader
	// Engine is the engine whose current set says what to keep.
	Engine *policies.Engine
	// MaxAge bounds how stale a document may be reused; 0 is
	// DefaultInventoryMaxAge.
	MaxAge time.Duration

	mu       sync.Mutex
	doc      ast.Object
	built    time.Time
	revision string
}

// Document implements policies.Inventory.
func (c *CacheInventory) Document() (ast.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.Engine.Current()
	if set == nil {
		return nil, fmt.Errorf("no policy set")
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultInventoryMaxAge
	}
	if c.doc != nil && c.revision == set.Revision && time.Since(c.built) < maxAge {
		return c.doc, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var objects []map[string]any
	for _, k := range set.InventoryKinds() {
		var list client.ObjectList
		switch {
		case k.APIVersion == qnv1alpha1.GroupVersion.String() && k.Kind == "QuantumNode":
			list = &qnv1alpha1.QuantumNodeList{}
		case k.APIVersion == "v1" && k.Kind == "Node":
			list = &corev1.NodeList{}
		default:
			return nil, fmt.Errorf("qn-controller's background audit keeps no inventory of %s: it watches QuantumNodes and Nodes only", k)
		}
		if err := c.Reader.List(ctx, list); err != nil {
			return nil, fmt.Errorf("list %s for the inventory: %w", k, err)
		}
		items, err := unstructuredItems(list, k)
		if err != nil {
			return nil, err
		}
		objects = append(objects, items...)
	}
	snap, err := inventory.FromObjects(objects, set.Compiled.InventoryReads())
	if err != nil {
		return nil, err
	}
	doc, err := snap.Document()
	if err != nil {
		return nil, err
	}
	c.doc, c.built, c.revision = doc, time.Now(), set.Revision
	return doc, nil
}

// unstructuredItems are a typed list's items as JSON objects, with the
// apiVersion and kind a cache's typed objects leave out.
func unstructuredItems(list client.ObjectList, k policies.InventoryKind) ([]map[string]any, error) {
	var items []runtime.Object
	switch l := list.(type) {
	case *qnv1alpha1.QuantumNodeList:
		for i := range l.Items {
			items = append(items, &l.Items[i])
		}
	case *corev1.NodeList:
		for i := range l.Items {
			items = append(items, &l.Items[i])
		}
	}
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(it)
		if err != nil {
			return nil, fmt.Errorf("inventory: %w", err)
		}
		m["apiVersion"], m["kind"] = k.APIVersion, k.Kind
		out = append(out, m)
	}
	return out, nil
}
