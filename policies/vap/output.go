package vap

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Objects are the policy, its binding and its parameters as the API server
// stores them, without the empty fields a typed object marshals
// (creationTimestamp, status): what `kubectl apply` sends.
func (r *Result) Objects() ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, obj := range []any{r.Policy, r.Binding, r.Params} {
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(data, &u.Object); err != nil {
			return nil, err
		}
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(u.Object, "status")
		out = append(out, u)
	}
	return out, nil
}

// YAML is the stream `qnctl vap` writes, ready for `kubectl apply -f -`:
// the report as comments, then the policy, its binding and its parameters.
func (r *Result) YAML() ([]byte, error) {
	objs, err := r.Objects()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, line := range r.Report.Text() {
		if line == "" {
			b.WriteString("#\n")
			continue
		}
		fmt.Fprintf(&b, "# %s\n", line)
	}
	for _, obj := range objs {
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.Bytes(), nil
}
