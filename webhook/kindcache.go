package webhook

import (
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/internal/cowcache"
)

// kindsByBytes decodes a review's kind and resource pairs by their bytes.
// A webhook sees the same few in every request (its rules name a handful
// of resources), so each distinct one is decoded once and then found by a
// map lookup: no value is built for them, four times a request.
var kindsByBytes = &kindCache{}

// kindCache maps a pair's bytes to its value.
type kindCache struct {
	gvks cowcache.Cache[string, metav1.GroupVersionKind]
	gvrs cowcache.Cache[string, metav1.GroupVersionResource]
}

// gvk is the GroupVersionKind the object raw holds (its only members
// group, version and kind, each a string), as gvk reads its value; false
// for anything else, which strict decoding refuses or reads otherwise.
func (c *kindCache) gvk(raw []byte) (metav1.GroupVersionKind, bool) {
	return lookup(&c.gvks, raw, func(t *ast.Term) (metav1.GroupVersionKind, bool) {
		k, ok := gvk(t)
		// Own copies: the decoded strings share their decoder's buffer.
		return metav1.GroupVersionKind{Group: strings.Clone(k.Group), Version: strings.Clone(k.Version), Kind: strings.Clone(k.Kind)}, ok
	})
}

// gvr is gvk for a GroupVersionResource.
func (c *kindCache) gvr(raw []byte) (metav1.GroupVersionResource, bool) {
	return lookup(&c.gvrs, raw, func(t *ast.Term) (metav1.GroupVersionResource, bool) {
		r, ok := gvr(t)
		return metav1.GroupVersionResource{Group: strings.Clone(r.Group), Version: strings.Clone(r.Version), Resource: strings.Clone(r.Resource)}, ok
	})
}

func lookup[T any](cache *cowcache.Cache[string, T], raw []byte, read func(*ast.Term) (T, bool)) (T, bool) {
	if v, ok := cowcache.GetBytes(cache, raw); ok {
		return v, true
	}
	var zero T
	if raw == nil {
		return zero, false
	}
	value, err := astjson.Decode(raw)
	if err != nil {
		return zero, false
	}
	v, ok := read(ast.NewTerm(value))
	if !ok {
		return zero, false // refused values are not kept: the slow path answers them
	}
	cache.Add(string(raw), v)
	return v, true
}
