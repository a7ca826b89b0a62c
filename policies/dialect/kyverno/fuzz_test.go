package kyverno

import (
	"context"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

// FuzzReadAndJudge: any policy document and any object give a policy or a
// problem, and a verdict, never a panic.
func FuzzReadAndJudge(f *testing.F) {
	f.Add(requireLabels, pod)
	f.Add(strings.Replace(requireLabels, "pattern:", "anyPattern:\n      -", 1), pod)
	f.Add("apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: x}\nspec:\n  rules:\n  - name: r\n    match: {resources: {kinds: ['*']}}\n    validate:\n      foreach:\n      - list: request.object.spec.containers\n        deny: {conditions: [{key: '{{ element.image }}', operator: GreaterThan, value: 3}]}\n", pod)
	f.Add("apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: x}\nspec: {rules: [{name: r, match: {resources: {kinds: [Pod]}}, validate: {deny: {conditions: {any: [{key: '{{ length(@) }}', operator: Equals, value: 1}]}}}}]}\n", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
	f.Fuzz(func(t *testing.T, policy, object string) {
		docs, err := dialect.Documents("p.yaml", []byte(policy))
		if err != nil || len(docs) == 0 {
			return
		}
		p, pr := Parse(docs[0])
		if pr != nil {
			if pr.File != "p.yaml" || pr.Message == "" {
				t.Fatalf("a problem that does not say where or what: %+v", pr)
			}
			return
		}
		var obj map[string]any
		if sigsyaml.Unmarshal([]byte(object), &obj) != nil || obj == nil {
			return
		}
		if _, ok := obj["kind"].(string); !ok {
			return
		}
		for _, op := range []string{"CREATE", "UPDATE", "DELETE"} {
			req := request(op, obj, obj)
			p.Evaluate(context.Background(), req)
			req.Background = true
			p.Results(context.Background(), req)
		}
	})
}
