package inventory

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// lastApplied is kubectl's copy of the whole object in an annotation.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// prune keeps of obj what policies read: apiVersion, kind, metadata.name
// and metadata.namespace, and every path of fields (an empty path: the
// whole object, without managedFields and kubectl's last-applied copy,
// which no admission rule needs and which double an object's size).
func prune(obj map[string]any, fields [][]string) map[string]any {
	for _, f := range fields {
		if len(f) == 0 {
			return wholeObject(obj)
		}
	}
	out := map[string]any{}
	for _, k := range []string{"apiVersion", "kind"} {
		if v, ok := obj[k]; ok {
			out[k] = v
		}
	}
	keep(out, obj, []string{"metadata", "name"})
	keep(out, obj, []string{"metadata", "namespace"})
	for _, f := range fields {
		keep(out, obj, f)
	}
	return out
}

// keep copies obj's value at path into out, making the maps on its way.
func keep(out, obj map[string]any, path []string) {
	src, dst := obj, out
	for i, k := range path {
		v, ok := src[k]
		if !ok {
			return
		}
		if i == len(path)-1 {
			dst[k] = v
			return
		}
		next, ok := v.(map[string]any)
		if !ok {
			dst[k] = v // a read below a non-object: keep what is there
			return
		}
		d, ok := dst[k].(map[string]any)
		if !ok {
			d = map[string]any{}
			dst[k] = d
		}
		src, dst = next, d
	}
}

func wholeObject(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return out
	}
	m := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" {
			m[k] = v
		}
	}
	if ann, ok := meta["annotations"].(map[string]any); ok {
		if _, has := ann[lastApplied]; has {
			a := make(map[string]any, len(ann))
			for k, v := range ann {
				if k != lastApplied {
					a[k] = v
				}
			}
			m["annotations"] = a
		}
	}
	out["metadata"] = m
	return out
}

// term is a pruned object as a Rego value.
func term(obj map[string]any) (*ast.Term, error) {
	v, err := ast.InterfaceToValue(obj)
	if err != nil {
		return nil, err
	}
	return ast.NewTerm(v), nil
}
