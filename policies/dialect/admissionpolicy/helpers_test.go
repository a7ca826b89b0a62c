package admissionpolicy_test

import (
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies/dialect"
	"github.com/quantumnode/qn-admission/policies/dialect/admissionpolicy"
)

// documents splits files into the documents the policies package hands
// a reader: those of its kinds, and the others.
func documents(t testing.TB, files map[string]string) (mine, others []dialect.Document) {
	t.Helper()
	kinds := admissionpolicy.Reader{}.Kinds()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		dec := yaml.NewDecoder(strings.NewReader(files[name]))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("%s: %v", name, err)
				}
				break
			}
			m := n.Content[0]
			var head struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
			}
			if err := m.Decode(&head); err != nil {
				t.Fatal(err)
			}
			d := dialect.Document{File: name, Line: m.Line, APIVersion: head.APIVersion, Kind: head.Kind, Node: m}
			if contains(kinds, dialect.Key(d.APIVersion, d.Kind)) {
				mine = append(mine, d)
			} else {
				others = append(others, d)
			}
		}
	}
	return mine, others
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// read reads files, failing t on any problem.
func read(t testing.TB, files map[string]string) map[string]dialect.Policy {
	t.Helper()
	pols, problems := readAll(t, files)
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problem.Problems(problems))
	}
	return pols
}

func readAll(t testing.TB, files map[string]string) (map[string]dialect.Policy, []*problem.Problem) {
	t.Helper()
	mine, others := documents(t, files)
	pols, problems := admissionpolicy.Reader{}.ReadWithParams(mine, others)
	out := map[string]dialect.Policy{}
	for _, p := range pols {
		out[p.Name()] = p
	}
	return out, problems
}

// qnRequest is a QuantumNode request in namespace edge.
func qnRequest(op string, obj, old map[string]any) *dialect.Request {
	name := ""
	for _, o := range []map[string]any{obj, old} {
		if o != nil {
			name = o["metadata"].(map[string]any)["name"].(string)
		}
	}
	return &dialect.Request{
		Operation: op, Object: obj, OldObject: old,
		UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"qn:operators", "system:authenticated"}},
		Kind:     metav1.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"},
		Resource: metav1.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"},
		Name:     name, Namespace: "edge",
	}
}

// quantumNode is a valid QuantumNode in namespace edge.
func quantumNode(name string, labels map[string]string, arch string, ports ...int64) map[string]any {
	meta := map[string]any{"name": name, "namespace": "edge"}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		meta["labels"] = l
	}
	var services []any
	for i, p := range ports {
		services = append(services, map[string]any{"name": "svc" + string(rune('a'+i)), "port": p})
	}
	spec := map[string]any{"hardware": map[string]any{"arch": arch}}
	if services != nil {
		spec["services"] = services
	}
	return map[string]any{"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": meta, "spec": spec}
}

func evaluate(p dialect.Policy, req *dialect.Request) []dialect.Finding {
	return p.Evaluate(context.Background(), req)
}
