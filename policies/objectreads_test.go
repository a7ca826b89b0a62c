package policies

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// oneRoleTable is a role table whose role r has a window of three changes
// per user and runs package p.
const oneRoleTable = "defaultRole: r\nroles:\n  r:\n    operations: [CREATE, UPDATE]\n    window: {limit: 3, period: 60s}\n    packages: [p]\n"

// denyLabelled refuses nodes labelled deny=yes.
const denyLabelled = `package p
deny contains "labelled deny" if input.context.labels.deny == "yes"
`

// loadMapSet loads oneRoleTable with policy as package p.
func loadMapSet(t *testing.T, policy string) *Set {
	t.Helper()
	set, err := Load(context.Background(), fstest.MapFS{"roles.yaml": {Data: []byte(oneRoleTable)}, "p.rego": {Data: []byte(policy)}}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// partForm is in as the webhook builds it under reads: the objects
// decoded from their bytes, only what reads reads.
func partForm(t *testing.T, in *Input, reads *ObjectReads) *Input {
	t.Helper()
	out := valueForm(t, in)
	out.ObjectReads = reads
	var err error
	if len(in.Request.Object.Raw) > 0 {
		if out.ObjectValue, _, err = astjson.DecodeProjected(in.Request.Object.Raw, reads.Object); err != nil {
			t.Fatal(err)
		}
	}
	if len(in.Request.OldObject.Raw) > 0 {
		if out.OldObjectValue, _, err = astjson.DecodeProjected(in.Request.OldObject.Raw, reads.OldObject); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestTheBundledSetReadsPartOfTheObjects(t *testing.T) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := set.objectReads.Object.String(), "{apiVersion,kind,metadata:{annotations,labels},spec}"; got != want {
		t.Errorf("request.object reads %s, want %s", got, want)
	}
	if got, want := set.objectReads.OldObject.String(), "{apiVersion,kind,metadata:{annotations,labels},spec:{hardware:{arch}}}"; got != want {
		t.Errorf("request.oldObject reads %s, want %s", got, want)
	}
}

// Any read of an object as a whole makes the set decode it whole.
func TestAWholeObjectReadDecodesTheObjectWhole(t *testing.T) {
	for name, policy := range map[string]string{
		"walk over the input":                 "package p\ndeny contains \"x\" if { walk(input, [p, v]); v == \"x\" }\n",
		"json.marshal of the object":          "package p\ndeny contains s if s := json.marshal(input.request.object)\n",
		"the object passed to a function":     "package p\nf(o) := o.status\ndeny contains \"x\" if f(input.request.object)\n",
		"the object bound to a variable":      "package p\ndeny contains \"x\" if { o := input.request.object; count(o) > 3 }\n",
		"a variable key below the object":     "package p\ndeny contains k if input.request.object[k] == \"x\"\n",
		"the whole request counted":           "package p\ndeny contains \"x\" if count(input.request) > 100\n",
		"the input passed to a function":      "package p\nf(i) := i.request.object.status\ndeny contains \"x\" if f(input)\n",
		"object.get with a computed path":     "package p\nk := concat(\"\", [\"sta\", \"tus\"])\ndeny contains \"x\" if object.get(input.request.object, k, null)\n",
		"an import of the request":            "package p\nimport input.request as req\ndeny contains \"x\" if count(req) > 100\n",
		"the object's keys taken as a set":    "package p\ndeny contains \"x\" if { some k; input.request.object[k]; k == \"status\" }\n",
		"the object compared to another":      "package p\ndeny contains \"x\" if input.request.object == input.request.oldObject\n",
		"a rule of another package read back": "package p\nobj := input.request.object\ndeny contains \"x\" if data.p.obj.status\n",
	} {
		t.Run(name, func(t *testing.T) {
			set := loadMapSet(t, policy)
			if set.objectReads.Object != nil {
				t.Errorf("request.object reads %s, want everything (*)", set.objectReads.Object)
			}
		})
	}
}

// decisionInputs are the inputs the decisions are compared on: every load
// fixture, every bundled fixture case and generated QuantumNodes.
func decisionInputs(t *testing.T) map[string]*Input {
	inputs := map[string]*Input{}
	for name, in := range loadFixtureInputs(t) {
		inputs[name] = in
	}
	for name, in := range bundledCaseInputs(t) {
		inputs[name] = in
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for i := 0; i < 100; i++ {
		inputs[fmt.Sprintf("generated QuantumNode %d", i)] = generatedInput(t, rng)
	}
	return inputs
}

// The engine decides alike on objects decoded whole and on only what the
// set reads of them: every answer, patch, warning, finding and window.
func TestDecisionsAreTheSameOnWhatTheSetReads(t *testing.T) {
	set, err := Load(context.Background(), rego.Bundled(), LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	inputs := decisionInputs(t)
	names := make([]string, 0, len(inputs))
	for name := range inputs {
		names = append(names, name)
	}
	sort.Strings(names)
	decide := func(in *Input) []Decision {
		clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC))
		e := NewEngine(set, EngineOptions{Windows: window.NewMemoryStore(clk, window.MemoryOptions{}), Metrics: NewMetrics(prometheus.NewRegistry())})
		var out []Decision
		for range 2 {
			out = append(out, e.Mutate(context.Background(), in), e.Validate(context.Background(), in))
		}
		for i, d := range out {
			if d.WindowStore != nil {
				store := *d.WindowStore
				store.Latency = 0 // of the store call, not of the answer
				out[i].WindowStore = &store
			}
		}
		x, err := e.Explain(context.Background(), in, PathValidate)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Decision{Message: fmt.Sprint(x.Result, x.Firings, x.Patterns)})
		return out
	}
	denied := 0
	for _, name := range names {
		in := inputs[name]
		whole := decide(valueForm(t, in))
		part := decide(partForm(t, in, set.objectReads))
		if !reflect.DeepEqual(whole, part) {
			t.Fatalf("%s: objects whole %+v\nin part %+v", name, whole, part)
		}
		if !whole[1].Allowed {
			denied++
		}
	}
	if denied == 0 || denied == len(names) {
		t.Fatalf("%d of %d inputs denied: the comparison needs both answers", denied, len(names))
	}
	t.Logf("%d inputs, %d denied, decided alike", len(names), denied)
}

// A request decoded for one set and judged by another that reads more (a
// reload between the two, or the shadow's candidate) is judged on what
// the second reads: the engine decodes the objects again, whole.
func TestASetThatReadsMoreThanTheDecodingGetsWhatItReads(t *testing.T) {
	labels := loadMapSet(t, denyLabelled)
	status := loadMapSet(t, "package p\ndeny contains \"failed nodes are frozen\" if input.request.oldObject.status.phase == \"Failed\"\n")
	if labels.objectReads.Covers(status.objectReads) {
		t.Fatalf("%v covers %v; the test needs a set that reads more", labels.objectReads.OldObject, status.objectReads.OldObject)
	}
	object := []byte(`{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"n","namespace":"edge"},"spec":{},"status":{"phase":"Failed"}}`)
	in := requestInput(t, quantumNodeRequest(admissionv1.Update, "alice", object, object))
	decodedForLabels := partForm(t, in, labels.objectReads)
	if ValueAt(decodedForLabels.OldObjectValue, "status") != nil {
		t.Fatalf("decoded for the labels set, the old object is %v: its status should be left out", decodedForLabels.OldObjectValue)
	}
	e := NewEngine(labels, EngineOptions{})
	if d := e.Validate(context.Background(), decodedForLabels); !d.Allowed {
		t.Fatalf("the labels set denies: %+v", d)
	}
	e.Swap(status) // a reload after the request was decoded
	d := e.Validate(context.Background(), decodedForLabels)
	if d.Allowed || d.Message == "" {
		t.Fatalf("judged by the set that reads the status, the request is allowed: %+v", d)
	}
	if want := e.Validate(context.Background(), valueForm(t, in)); d.Allowed != want.Allowed || !reflect.DeepEqual(d.Denials, want.Denials) {
		t.Fatalf("decoded in part %+v, whole %+v", d, want)
	}
}

// A request decoded for what its kind is read for is judged as decoded:
// the engine decodes nothing again for it (Input.readableBy).
func TestARequestDecodedForItsKindIsJudgedAsDecoded(t *testing.T) {
	set := loadMapSet(t, `package p
is_qn if input.request.kind.kind == "QuantumNode"
deny contains "no spec" if { is_qn; not input.request.object.spec.a }
deny contains "labelled deny" if input.context.labels.deny == "yes"
`)
	pod := GroupVersionKind{Version: "v1", Kind: "Pod"}
	podReads := set.objectReads.ForKind(pod)
	if podReads == set.objectReads || set.objectReads.ForKind(pod) != podReads {
		t.Fatalf("a Pod's reads %v: want narrower than %v, and kept", podReads.Object, set.objectReads.Object)
	}
	in := &Input{Facts: Facts{Kind: pod}, ObjectReads: podReads, Request: &admissionv1.AdmissionRequest{}}
	if got, err := in.readableBy(set); err != nil || got != in {
		t.Fatalf("a Pod decoded for its kind is decoded again (%v)", err)
	}
	in.Facts.Kind = GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"}
	if in.ObjectReads.Covers(set.objectReads.ForKind(in.Facts.Kind)) {
		t.Fatal("a Pod's reads cover a QuantumNode's; the test needs them narrower")
	}
}
