package inventory

import (
	"fmt"
	"testing"
)

// BenchmarkChange is what one stored change costs the inventory besides
// the informer's decoding: prune, Rego value, put, and the publish of a
// document of 10,000 QuantumNodes in 100 namespaces and 5,000 Nodes
// (worst case: every change published alone; with one publish per 100 ms
// at 100 writes a second, ten changes share one). CPU at 100 writes a
// second is 100 times ns/op, at most.
func BenchmarkChange(b *testing.B) {
	fields := [][]string{{"spec", "nodeName"}}
	d := newDocument()
	qn := func(i, node int) map[string]any {
		return map[string]any{"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
			"metadata": map[string]any{"name": fmt.Sprintf("qn-%05d", i), "namespace": fmt.Sprintf("team-%03d", i%100), "labels": map[string]any{"a": "b"}},
			"spec":     map[string]any{"nodeName": fmt.Sprintf("worker-%05d", node), "hardware": map[string]any{"arch": "arm64"}}}
	}
	put := func(obj map[string]any) {
		t, err := term(prune(obj, fields))
		if err != nil {
			b.Fatal(err)
		}
		meta := obj["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		d.put(ns, obj["apiVersion"].(string), obj["kind"].(string), meta["name"].(string), t)
	}
	for i := range 10_000 {
		put(qn(i, i%5000))
	}
	for i := range 5000 {
		put(map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": fmt.Sprintf("worker-%05d", i)}})
	}
	d.publish()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		put(qn(i%10_000, i%4999))
		d.publish()
		i++
	}
}
