// Package inventory keeps the cluster's stored objects that policies read
// as data.inventory, in Gatekeeper's shape:
// data.inventory.cluster[groupVersion][kind][name] for cluster-scoped
// objects and data.inventory.namespace[namespace][groupVersion][kind][name]
// for the others. Objects hold only the fields the policy set reads
// (rego.Compiled.InventoryReads) besides their name and namespace. Cluster
// watches the API server with informers; FromObjects builds a fixed
// inventory from a snapshot file for qnctl.
package inventory

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// leafKey is one kind in one namespace ("" for cluster-scoped objects).
type leafKey struct{ namespace, groupVersion, kind string }

// leaf holds the objects of one kind in one namespace, and the Rego
// object last built of them; a change rebuilds only its own leaf.
type leaf struct {
	objects map[string]*ast.Term
	built   ast.Object
	dirty   bool
}

// document is the inventory's objects and the document last published.
// Writers (informer handlers) change the leaves; publish builds a new
// immutable document that evaluations read without locks.
type document struct {
	mu     sync.Mutex
	leaves map[leafKey]*leaf
	// clusterKinds are the cluster-scoped kinds held: each is {} in the
	// document when it has no object, so a policy can tell "no such Node"
	// from "no inventory of Nodes".
	clusterKinds map[leafKey]bool
	// dirtySince is when the oldest change not yet published was made
	// (zero: none).
	dirtySince time.Time
	published  ast.Object
}

func newDocument() *document {
	return &document{leaves: map[leafKey]*leaf{}, clusterKinds: map[leafKey]bool{}, published: emptyDocument()}
}

func emptyDocument() ast.Object {
	return ast.NewObject(
		ast.Item(ast.StringTerm("cluster"), ast.ObjectTerm()),
		ast.Item(ast.StringTerm("namespace"), ast.ObjectTerm()),
	)
}

// holdKind makes a cluster-scoped kind appear ({} when empty).
func (d *document) holdKind(groupVersion, kind string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clusterKinds[leafKey{groupVersion: groupVersion, kind: kind}] = true
	d.touch(time.Now())
}

// dropKind removes a kind and its objects.
func (d *document) dropKind(groupVersion, kind string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.clusterKinds, leafKey{groupVersion: groupVersion, kind: kind})
	for k := range d.leaves {
		if k.groupVersion == groupVersion && k.kind == kind {
			delete(d.leaves, k)
		}
	}
	d.touch(time.Now())
}

func (d *document) touch(now time.Time) {
	if d.dirtySince.IsZero() {
		d.dirtySince = now
	}
}

// put stores (or replaces) one object.
func (d *document) put(namespace, groupVersion, kind, name string, obj *ast.Term) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := leafKey{namespace, groupVersion, kind}
	l := d.leaves[k]
	if l == nil {
		l = &leaf{objects: map[string]*ast.Term{}}
		d.leaves[k] = l
	}
	l.objects[name] = obj
	l.dirty = true
	d.touch(time.Now())
}

// remove deletes one object.
func (d *document) remove(namespace, groupVersion, kind, name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := leafKey{namespace, groupVersion, kind}
	l := d.leaves[k]
	if l == nil {
		return
	}
	delete(l.objects, name)
	if len(l.objects) == 0 {
		delete(d.leaves, k)
	} else {
		l.dirty = true
	}
	d.touch(time.Now())
}

// unpublishedFor is how long the oldest unpublished change has waited.
func (d *document) unpublishedFor(now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dirtySince.IsZero() {
		return 0
	}
	return now.Sub(d.dirtySince)
}

// current is the document last published.
func (d *document) current() ast.Object {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.published
}

// count is how many objects of each kind ("groupVersion kind") it holds.
func (d *document) count() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for k, l := range d.leaves {
		out[k.groupVersion+" "+k.kind] += len(l.objects)
	}
	return out
}

// publish builds a new document when something changed: the changed
// leaves are built again, the others reused, so a change costs its own
// kind and namespace, not the whole inventory.
func (d *document) publish() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dirtySince.IsZero() {
		return
	}
	cluster, namespaces := ast.NewObject(), ast.NewObject()
	for k := range d.clusterKinds {
		child(cluster, k.groupVersion).Insert(ast.StringTerm(k.kind), ast.ObjectTerm())
	}
	keys := make([]leafKey, 0, len(d.leaves))
	for k := range d.leaves {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
	for _, k := range keys {
		l := d.leaves[k]
		if l.dirty || l.built == nil {
			names := make([]string, 0, len(l.objects))
			for n := range l.objects {
				names = append(names, n)
			}
			slices.Sort(names)
			obj := ast.NewObject()
			for _, n := range names {
				obj.Insert(ast.StringTerm(n), l.objects[n])
			}
			l.built, l.dirty = obj, false
		}
		parent := cluster
		if k.namespace != "" {
			parent = child(namespaces, k.namespace)
		}
		child(parent, k.groupVersion).Insert(ast.StringTerm(k.kind), ast.NewTerm(l.built))
	}
	d.published = ast.NewObject(
		ast.Item(ast.StringTerm("cluster"), ast.NewTerm(cluster)),
		ast.Item(ast.StringTerm("namespace"), ast.NewTerm(namespaces)),
	)
	d.dirtySince = time.Time{}
}

func keyLess(a, b leafKey) bool {
	if a.namespace != b.namespace {
		return a.namespace < b.namespace
	}
	if a.groupVersion != b.groupVersion {
		return a.groupVersion < b.groupVersion
	}
	return a.kind < b.kind
}

// child is obj[key], made an empty object first when absent.
func child(obj ast.Object, key string) ast.Object {
	k := ast.StringTerm(key)
	if t := obj.Get(k); t != nil {
		return t.Value.(ast.Object)
	}
	c := ast.NewObject()
	obj.Insert(k, ast.NewTerm(c))
	return c
}
