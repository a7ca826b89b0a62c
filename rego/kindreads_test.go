package rego

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

var (
	quantumNodeKind = Kind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"}
	podKind         = Kind{Version: "v1", Kind: "Pod"}
)

// gated is a QuantumNode rule set in the bundled set's shape: a helper
// rule gates the deny rules on the kind, and spec is a rule with no gate
// of its own, read only through gated bodies.
const gated = `package p
is_qn if {
	input.request.kind.group == "qn.dev"
	input.request.kind.kind == "QuantumNode"
}
judged if {
	is_qn
	input.request.operation in {"CREATE", "UPDATE"}
}
spec := object.get(input.request, ["object", "spec"], {})
valid if count(spec.services) > 0
invalid if {
	judged
	not valid
}
deny contains "invalid" if invalid
deny contains "team" if input.request.object.metadata.labels.team == "x"
`

func TestInputReadsBelowForKind(t *testing.T) {
	object := []string{"request", "object"}
	cases := map[string]struct {
		source string
		kind   Kind
		want   string
	}{
		"a kind's own rules are read":                    {gated, quantumNodeKind, "[[metadata labels team] [spec]]"},
		"another kind skips what only gated bodies read": {gated, podKind, "[[metadata labels team]]"},
		"a comparison in either order, and with =": {
			"package p\ndeny contains \"x\" if { \"Pod\" == input.request.kind.kind; input.request.object.spec.a }\ndeny contains \"y\" if { input.request.kind.kind = \"Job\"; input.request.object.spec.b }\n",
			podKind, "[[spec a]]"},
		"in a constant set": {
			"package p\ndeny contains \"x\" if { input.request.kind.kind in {\"Deployment\", \"Job\"}; input.request.object.spec.a }\n",
			podKind, "[]"},
		"in a set that holds the kind": {
			"package p\ndeny contains \"x\" if { input.request.kind.kind in [\"Pod\", \"Job\"]; input.request.object.spec.a }\n",
			podKind, "[[spec a]]"},
		"!= the kind's own value": {
			"package p\ndeny contains \"x\" if { input.request.kind.kind != \"Pod\"; input.request.object.spec.a }\n",
			podKind, "[]"},
		"a negated condition holds as far as the analysis knows": {
			"package p\nis_pod if input.request.kind.kind == \"Pod\"\ndeny contains \"x\" if { not is_pod; input.request.object.spec.a }\n",
			podKind, "[[spec a]]"},
		"a rule with a default is always defined": {
			"package p\ndefault is_qn := false\nis_qn if input.request.kind.kind == \"QuantumNode\"\ndeny contains \"x\" if { is_qn; input.request.object.spec.a }\n",
			podKind, "[[spec a]]"},
		"a dead body hands over to its else": {
			"package p\nspec := input.request.object.spec.a if input.request.kind.kind == \"QuantumNode\" else := input.request.object.spec.b\ndeny contains \"x\" if spec\n",
			podKind, "[[spec b]]"},
		"one live definition keeps a rule defined": {
			"package p\nok if input.request.kind.kind == \"QuantumNode\"\nok if input.request.object.metadata.name\ndeny contains \"x\" if { ok; input.request.object.spec.a }\n",
			podKind, "[[metadata name] [spec a]]"},
		"a with modifier makes a condition about another input": {
			"package p\nis_qn if input.request.kind.kind == \"QuantumNode\"\ndeny contains \"x\" if { is_qn with input.request.kind.kind as \"QuantumNode\"; input.request.object.spec.a }\n",
			podKind, "[[spec a]]"},
		"the kind read through a rule's value is not followed": {
			"package p\nk := input.request.kind\ndeny contains \"x\" if { k.kind == \"QuantumNode\"; input.request.object.spec.a }\n",
			podKind, "[[spec a]]"},
		"rules no decision evaluates are not read": {
			"package p\nunused if input.request.object.spec.a\ndeny contains \"x\" if input.request.object.metadata.name\n",
			podKind, "[[metadata name]]"},
		"patch rules are read": {
			"package p\npatch contains {\"op\": \"add\", \"path\": \"/x\", \"value\": 1} if input.request.object.spec.a\n",
			podKind, "[[spec a]]"},
		"a condition after a read of the object prunes nothing": {
			"package p\ndeny contains \"x\" if { to_number(input.request.object.spec.a) > 1; input.request.kind.kind == \"Job\" }\n",
			podKind, "[[spec a]]"},
		"a condition after a rule that reads the object prunes nothing": {
			"package p\nbig if count(input.request.object.spec.items) > 3\ndeny contains \"x\" if { big; input.request.kind.kind == \"Job\"; input.request.object.spec.b }\n",
			podKind, "[[spec b] [spec items]]"},
		"a condition after reads of anything else prunes": {
			"package p\ndeny contains \"x\" if { input.request.operation == \"CREATE\"; input.context.user != \"a\"; input.request.kind.kind == \"Job\"; input.request.object.spec.a }\n",
			podKind, "[]"},
		"a rule gated on the group": {
			"package p\ndeny contains \"x\" if { input.request.kind.group == \"qn.dev\"; input.request.object.spec.a }\n",
			podKind, "[]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			compiled, err := Compile([]Module{{Path: "p.rego", Source: c.source}}, nil, CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := compiled.InputReadsBelowForKind(c.kind, object...)
			slices.SortFunc(got, func(a, b []string) int { return strings.Compare(strings.Join(a, "."), strings.Join(b, ".")) })
			got = slices.CompactFunc(got, slices.Equal)
			if fmt.Sprint(got) != c.want {
				t.Errorf("InputReadsBelowForKind(%v, request.object) = %v, want %s", c.kind, got, c.want)
			}
		})
	}
}

// Every kind's reads are among what the set may read for any kind.
func TestReadsForAKindAreAmongTheSetsReads(t *testing.T) {
	compiled := compileBundled(t)
	all := compiled.InputReadsBelow("request")
	for _, kind := range []Kind{quantumNodeKind, podKind, {Group: "apps", Version: "v1", Kind: "Deployment"}} {
		for _, p := range compiled.InputReadsBelowForKind(kind, "request") {
			if !slices.ContainsFunc(all, func(q []string) bool { return prefixesMeet(p, q) && len(q) <= len(p) }) {
				t.Errorf("%v reads %v, which the set's reads %v do not cover", kind, p, all)
			}
		}
	}
	if got := compiled.InputReadsBelowForKind(podKind, "request", "object"); slices.ContainsFunc(got, func(p []string) bool { return len(p) == 0 || p[0] == "spec" }) {
		t.Errorf("the bundled set reads %v of a Pod; its rules on spec are QuantumNode rules", got)
	}
	if got := compiled.InputReadsBelowForKind(quantumNodeKind, "request", "object"); !slices.ContainsFunc(got, func(p []string) bool { return len(p) > 0 && p[0] == "spec" }) {
		t.Errorf("the bundled set reads %v of a QuantumNode; want its spec", got)
	}
}
