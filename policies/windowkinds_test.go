package policies

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies/window"
)

// A role's window counts QuantumNode changes unless it names other kinds:
// a role that also judges Pods (webhook.additionalResources) never
// rate-limits the controllers that create them by default.
func TestAWindowCountsTheKindsItNames(t *testing.T) {
	pod := GroupVersionKind{Version: "v1", Kind: "Pod"}
	deployment := GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	quantumNode := GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"}
	cases := map[string]struct {
		kinds   string
		counted []GroupVersionKind
		free    []GroupVersionKind
	}{
		"by default, QuantumNodes only":       {kinds: "", counted: []GroupVersionKind{quantumNode}, free: []GroupVersionKind{pod, deployment}},
		"Pods named by kind (the core group)": {kinds: "kinds: [Pod]", counted: []GroupVersionKind{pod}, free: []GroupVersionKind{quantumNode, deployment}},
		"group/Kind":                          {kinds: "kinds: [apps/Deployment, qn.dev/QuantumNode]", counted: []GroupVersionKind{deployment, quantumNode}, free: []GroupVersionKind{pod}},
		"every kind":                          {kinds: `kinds: ["*"]`, counted: []GroupVersionKind{pod, deployment, quantumNode}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			roles := "defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    window: {limit: 2, period: 1m" + map[bool]string{true: ", " + tc.kinds, false: ""}[tc.kinds != ""] + "}\n    packages: [p]\n"
			set, err := Load(context.Background(), fstest.MapFS{"roles.yaml": {Data: []byte(roles)}, "p.rego": {Data: []byte("package p\n")}}, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range append(append([]GroupVersionKind{}, tc.counted...), tc.free...) {
				// A window of its own for each kind: the kinds a window
				// counts share it.
				e := NewEngine(set, EngineOptions{Windows: window.NewMemoryStore(clocktesting.NewFakePassiveClock(t0), window.MemoryOptions{})})
				admitted := 0
				for i := range 3 {
					in := qnInput("CREATE", `{"apiVersion":"x","kind":"`+k.Kind+`","metadata":{"name":"a","namespace":"edge"}}`, "")
					in.Facts.Kind, in.Facts.UID = k, fmt.Sprintf("%s-%d", k.Kind, i)
					d := e.Validate(context.Background(), in)
					switch {
					case d.Allowed:
						admitted++
					case d.Code != http.StatusTooManyRequests:
						t.Fatalf("%s refused with %d: %s", k.Kind, d.Code, d.Message)
					}
				}
				counted := slices.Contains(tc.counted, k)
				if counted && admitted != 2 || !counted && admitted != 3 {
					t.Errorf("%s: %d of 3 changes admitted in a window of 2; counted by the window: %v", k.Kind, admitted, counted)
				}
			}
		})
	}
}

func TestWindowKindsThatAreNoKindAreRefusedAtTheirLine(t *testing.T) {
	for name, kinds := range map[string]string{
		"lower case":           "[pod]",
		"a resource":           "[apps/deployments]",
		"an empty group":       "[/Pod]",
		"a version":            "[apps/v1/Deployment]",
		"a star beside a kind": `["*", Pod]`,
	} {
		t.Run(name, func(t *testing.T) {
			roles := "defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    window:\n      limit: 2\n      period: 1m\n      kinds: " + kinds + "\n    packages: [p]\n"
			_, err := Load(context.Background(), fstest.MapFS{"roles.yaml": {Data: []byte(roles)}, "p.rego": {Data: []byte("package p\n")}}, LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), "roles.yaml:8: roles.r.window.kinds: kinds[") {
				t.Fatalf("kinds %s: %v", kinds, err)
			}
		})
	}
}
