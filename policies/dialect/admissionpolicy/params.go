package admissionpolicy

import (
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

// paramStore holds the documents of the directory of one paramKind: what
// a binding's paramRef finds, as the API server's informer would.
type paramStore struct {
	// namespaced says the kind is namespaced: a core kind known to be, or
	// one of whose documents sets metadata.namespace.
	namespaced bool
	objects    []*unstructured.Unstructured
}

// namespacedKinds are the core kinds most used as parameters; other
// kinds are namespaced when one of their documents says a namespace.
var namespacedKinds = map[string]bool{"v1 ConfigMap": true, "v1 Secret": true}

// newParamStore gathers the documents of kind from docs. A document of a
// namespaced kind without a namespace is in "default", as kubectl would
// apply it with an empty context.
func newParamStore(kind *admissionregistrationv1.ParamKind, docs []dialect.Document) (*paramStore, error) {
	s := &paramStore{namespaced: namespacedKinds[dialect.Key(kind.APIVersion, kind.Kind)]}
	for _, d := range docs {
		if d.APIVersion != kind.APIVersion || d.Kind != kind.Kind {
			continue
		}
		var v map[string]any
		if err := d.Node.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", d.File, d.Line, err)
		}
		u := &unstructured.Unstructured{Object: dialect.JSONValue(v).(map[string]any)}
		u.Object = normalise(u.Object).(map[string]any)
		if u.GetNamespace() != "" {
			s.namespaced = true
		}
		s.objects = append(s.objects, u)
	}
	if s.namespaced {
		for _, u := range s.objects {
			if u.GetNamespace() == "" {
				u.SetNamespace(metav1.NamespaceDefault)
			}
		}
	}
	return s, nil
}

// normalise makes YAML's numbers what the API server's JSON decoding
// makes of them (int64 and float64), as CEL's unstructured values need.
func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalise(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalise(e)
		}
	case int:
		return int64(x)
	case uint64:
		return int64(x)
	}
	return v
}

// collect is the API server's CollectParams for this binding: the
// parameters to judge the request with ([nil] when the policy or binding
// takes none; empty when none is found and the binding allows that), or
// the configuration error.
func (b *binding) collect(kind *admissionregistrationv1.ParamKind, namespace string) ([]runtime.Object, error) {
	ref := b.paramRef
	if kind == nil || ref == nil {
		return []runtime.Object{nil}, nil
	}
	s := b.params
	paramsNamespace := ""
	if s.namespaced {
		paramsNamespace = namespace
		if ref.Namespace != "" {
			paramsNamespace = ref.Namespace
		} else if paramsNamespace == "" {
			return nil, fmt.Errorf("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, fmt.Errorf("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var params []runtime.Object
	switch {
	case ref.Name != "":
		for _, u := range s.objects {
			if u.GetName() == ref.Name && u.GetNamespace() == paramsNamespace {
				params = append(params, u)
			}
		}
	case ref.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return nil, err
		}
		for _, u := range s.objects {
			if (!s.namespaced || u.GetNamespace() == paramsNamespace) && sel.Matches(labels.Set(u.GetLabels())) {
				params = append(params, u)
			}
		}
	default:
		return nil, fmt.Errorf("one of name or selector must be provided")
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.DenyAction {
		return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	return params, nil
}
