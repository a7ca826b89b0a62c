package kyverno

import (
	"context"
	"testing"
)

// BenchmarkClusterPolicy is one admission request judged by a
// ClusterPolicy with a pattern rule (and its two autogen rules, which do
// not match a Pod): what a role listing it adds per request.
func BenchmarkClusterPolicy(b *testing.B) {
	p := load(&testing.T{}, requireLabels)
	req := request("CREATE", object(&testing.T{}, pod), nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if len(p.Evaluate(ctx, req)) != 0 {
			b.Fatal("a labelled Pod failed")
		}
	}
}

// BenchmarkClusterPolicyForEach is a foreach/deny rule with a context
// variable and a JMESPath function over two containers.
func BenchmarkClusterPolicyForEach(b *testing.B) {
	p := load(&testing.T{}, `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: images}
spec:
  rules:
  - name: no-latest
    match: {resources: {kinds: [Pod]}}
    context:
    - name: banned
      variable: {value: [edge]}
    validate:
      failureAction: Enforce
      foreach:
      - list: request.object.spec.containers
        deny:
          conditions:
            any:
            - key: "{{ split(element.image, ':')[1] || 'latest' }}"
              operator: AnyIn
              value: "{{ banned }}"
`)
	req := request("CREATE", object(&testing.T{}, pod), nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if len(p.Evaluate(ctx, req)) != 0 {
			b.Fatal("denied")
		}
	}
}

// BenchmarkClusterPolicyImages is a deny rule and a foreach over Kyverno's
// images variable: what reading images costs a rule that names them.
func BenchmarkClusterPolicyImages(b *testing.B) {
	p := load(&testing.T{}, restrictRegistries)
	req := request("CREATE", object(&testing.T{}, `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  initContainers: [{name: init, image: "ghcr.io/init:1"}]
  containers: [{name: app, image: "ghcr.io/app:1.27"}, {name: side, image: "ghcr.io/side:2"}]
`), nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if len(p.Evaluate(ctx, req)) != 0 {
			b.Fatal("denied")
		}
	}
}
