package policies

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gomodules.xyz/jsonpatch/v2"

	"github.com/quantumnode/qn-admission/rego"
)

// wholeDocumentPatch is diffPatch without scoping: the whole object
// encoded, patched and diffed, as qn-webhook did before. The reference.
func wholeDocumentPatch(decoded map[string]any, ops []rego.PatchOp) ([]jsonpatch.Operation, error) {
	return applyAndDiff(decoded, ops)
}

// samePatch compares diffPatch's answer with the reference's: both fail,
// or both succeed with the same operations (a diff's order follows Go's
// map iteration, so operations are compared as sorted lists).
func samePatch(t *testing.T, doc map[string]any, ops []rego.PatchOp) {
	t.Helper()
	want, wantErr := wholeDocumentPatch(doc, ops)
	got, n, gotErr := diffPatch(doc, ops)
	opsJSON, _ := json.Marshal(ops)
	docJSON, _ := json.Marshal(doc)
	if (wantErr != nil) != (gotErr != nil) {
		t.Fatalf("on %s with %s: whole-document error %v, scoped error %v", docJSON, opsJSON, wantErr, gotErr)
	}
	if wantErr != nil {
		return
	}
	var gotOps []jsonpatch.Operation
	if got != nil {
		if err := json.Unmarshal(got, &gotOps); err != nil {
			t.Fatalf("scoped patch %s: %v", got, err)
		}
	}
	if n != len(gotOps) {
		t.Errorf("diffPatch counted %d operations in %s", n, got)
	}
	if a, b := sortedOps(t, want), sortedOps(t, gotOps); !slices.Equal(a, b) {
		t.Fatalf("on %s with %s:\nwhole document %v\nscoped         %v", docJSON, opsJSON, a, b)
	}
}

func sortedOps(t *testing.T, ops []jsonpatch.Operation) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		b, err := json.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		// Numbers as the patch's JSON would carry them.
		var v any
		_ = json.Unmarshal(b, &v)
		b, _ = json.Marshal(v)
		out[i] = string(b)
	}
	slices.Sort(out)
	return out
}

func decodeDoc(t testing.TB, s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

const patchTestNode = `{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"n","labels":{"a/b":"1","t~x":"2"},"annotations":{"qn-role":"batch"},"managedFields":[{"manager":"kubectl","fieldsV1":{"f:metadata":{}}}]},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883},{"name":"ota","port":8443}]}}`

func TestPatchIsDiffedInTheSmallestObjectItReaches(t *testing.T) {
	doc := decodeDoc(t, patchTestNode)
	cases := []struct {
		name  string
		ops   string
		scope string
		patch string
	}{
		{"label added", `[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`,
			"/metadata/labels", `[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`},
		{"label already set is no patch", `[{"op":"add","path":"/metadata/labels/a~1b","value":"1"}]`, "/metadata/labels", ``},
		{"missing parents are created", `[{"op":"add","path":"/metadata/finalizers2/x","value":true}]`,
			"/metadata", `[{"op":"add","path":"/metadata/finalizers2","value":{"x":true}}]`},
		{"two objects share their parent", `[{"op":"replace","path":"/spec/hardware/arch","value":"amd64"},{"op":"add","path":"/metadata/labels/z","value":"1"}]`,
			"", `[{"op":"add","path":"/metadata/labels/z","value":"1"},{"op":"replace","path":"/spec/hardware/arch","value":"amd64"}]`},
		{"arrays end the walk", `[{"op":"replace","path":"/spec/services/1/port","value":9443}]`,
			"/spec", `[{"op":"replace","path":"/spec/services/1/port","value":9443}]`},
		{"move takes its source into the scope", `[{"op":"move","from":"/metadata/labels/t~0x","path":"/metadata/annotations/t"}]`,
			"/metadata", `[{"op":"add","path":"/metadata/annotations/t","value":"2"},{"op":"remove","path":"/metadata/labels/t~0x"}]`},
		{"an escaped key's scope", `[{"op":"remove","path":"/metadata/labels/a~1b"}]`,
			"/metadata/labels", `[{"op":"remove","path":"/metadata/labels/a~1b"}]`},
		{"the whole document", `[{"op":"replace","path":"","value":{"kind":"X"}}]`, "", ``},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ops []rego.PatchOp
			if err := json.Unmarshal([]byte(c.ops), &ops); err != nil {
				t.Fatal(err)
			}
			if got := patchScopeOf(doc, ops).canonical; got != c.scope {
				t.Errorf("scope %q, want %q", got, c.scope)
			}
			samePatch(t, doc, ops)
			if c.patch == "" {
				return
			}
			got, _, err := diffPatch(doc, ops)
			if err != nil {
				t.Fatal(err)
			}
			var gotOps, wantOps []jsonpatch.Operation
			_ = json.Unmarshal(got, &gotOps)
			_ = json.Unmarshal([]byte(c.patch), &wantOps)
			if a, b := sortedOps(t, gotOps), sortedOps(t, wantOps); !slices.Equal(a, b) {
				t.Errorf("patch %s, want %s", got, c.patch)
			}
		})
	}
	if _, _, err := diffPatch(doc, []rego.PatchOp{{Op: "remove", Path: "/metadata/labels/absent"}}); err == nil {
		t.Error("removing an absent label must fail, as on the whole document")
	}
	// json-patch itself panics on this one (the whole document tested
	// against no value): an error, not a crash.
	if _, _, err := diffPatch(doc, []rego.PatchOp{{Op: "test", Path: ""}}); err == nil || !strings.Contains(err.Error(), "a test operation has no value") {
		t.Errorf("a test operation without a value: %v", err)
	}
}

// Random documents and operations, every kind of operation and pointer
// (existing, new, under missing parents, array indices and "-", escaped,
// out of range, the whole document): the scoped patch is the whole
// document's.
func TestScopedPatchMatchesWholeDocument(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 20000; i++ {
		var doc map[string]any
		if i%4 == 0 {
			doc = decodeDoc(t, patchTestNode)
		} else {
			doc, _ = randomValue(rng, 0, true).(map[string]any)
		}
		var pointers []string
		collectPointers(doc, "", &pointers)
		ops := make([]rego.PatchOp, 1+rng.IntN(3))
		for j := range ops {
			ops[j] = randomOp(rng, pointers)
		}
		samePatch(t, doc, ops)
	}
}

var patchKeys = []string{"metadata", "labels", "a", "b", "a/b", "t~x", "-", "0", "1", "", "~1"}

// jsonValues draws random JSON values: objects (keys from keys), arrays,
// numbers from numbers, booleans, nulls and strings.
type jsonValues struct {
	keys    []string
	numbers []any
}

func (g jsonValues) value(rng *rand.Rand, depth int, object bool) any {
	kind := rng.IntN(7)
	if object || (depth < 3 && kind == 0) {
		m := map[string]any{}
		for range rng.IntN(4) {
			m[g.keys[rng.IntN(len(g.keys))]] = g.value(rng, depth+1, false)
		}
		return m
	}
	switch kind {
	case 1:
		if depth < 3 {
			a := make([]any, rng.IntN(3))
			for i := range a {
				a[i] = g.value(rng, depth+1, false)
			}
			return a
		}
	case 2, 3:
		return g.numbers[rng.IntN(len(g.numbers))]
	case 4:
		return rng.IntN(2) == 0
	case 5:
		return nil
	}
	return g.keys[rng.IntN(len(g.keys))]
}

var patchValues = jsonValues{keys: patchKeys, numbers: []any{0.0, 1.0, 2.0, 3.0, 4.0, 1.5}}

func randomValue(rng *rand.Rand, depth int, object bool) any {
	return patchValues.value(rng, depth, object)
}

func collectPointers(v any, at string, out *[]string) {
	*out = append(*out, at)
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			collectPointers(c, at+"/"+escapePointer(k), out)
		}
	case []any:
		for i, c := range v {
			collectPointers(c, at+"/"+strconv.Itoa(i), out)
		}
	}
}

func randomPointer(rng *rand.Rand, pointers []string) string {
	p := pointers[rng.IntN(len(pointers))]
	switch rng.IntN(6) {
	case 0: // a new key
		return p + "/" + escapePointer(patchKeys[rng.IntN(len(patchKeys))])
	case 1: // under missing parents
		return p + "/new/" + escapePointer(patchKeys[rng.IntN(len(patchKeys))])
	case 2: // an array's end, or past it
		return p + []string{"/-", "/7", "/0"}[rng.IntN(3)]
	case 3: // raw, possibly unusual escapes
		return p + []string{"/a~1b", "/t~0x", "/~01", "/~2"}[rng.IntN(4)]
	}
	return p
}

func randomOp(rng *rand.Rand, pointers []string) rego.PatchOp {
	op := rego.PatchOp{
		Op:   []string{"add", "remove", "replace", "move", "copy", "test"}[rng.IntN(6)],
		Path: randomPointer(rng, pointers),
	}
	switch op.Op {
	case "add", "replace", "test":
		op.Value = randomValue(rng, 1, false)
	case "move", "copy":
		op.From = randomPointer(rng, pointers)
	}
	return op
}

// FuzzScopedPatchMatchesWholeDocument: any object and any operations, the
// scoped patch is the whole document's (or both fail).
func FuzzScopedPatchMatchesWholeDocument(f *testing.F) {
	f.Add([]byte(patchTestNode), []byte(`[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`))
	f.Add([]byte(patchTestNode), []byte(`[{"op":"move","from":"/spec/services/0","path":"/metadata/x/y"},{"op":"test","path":"/metadata/x/y/name","value":"mqtt"}]`))
	f.Add([]byte(`{"a":{"b":[{"c":{}}]}}`), []byte(`[{"op":"add","path":"/a/b/0/c/d~1e","value":1},{"op":"copy","from":"/a/b","path":"/a/f"}]`))
	f.Fuzz(func(t *testing.T, docJSON, opsJSON []byte) {
		var doc map[string]any
		var ops []rego.PatchOp
		if json.Unmarshal(docJSON, &doc) != nil || doc == nil || json.Unmarshal(opsJSON, &ops) != nil || len(ops) > 8 {
			return
		}
		samePatch(t, doc, ops)
	})
}

// A patch that would make json-patch pad an array far past any real
// object's length is refused at once, naming the operation; numbers that
// name existing object keys, existing elements and small new arrays pass.
func TestPatchMayNotPadArraysWithoutBound(t *testing.T) {
	refused := []string{
		`[{"op":"add","path":"/metadata/x/999999/y","value":1}]`,
		`[{"op":"add","path":"0/metadata/x/999999/y","value":1}]`, // json-patch drops what precedes the first slash
		`[{"op":"add","path":"/spec/services/999999/name","value":"a"}]`,
		`[{"op":"add","path":"/metadata/labels/a/4097","value":"1"}]`,
		`[{"op":"copy","from":"/spec/hardware","path":"/spec/z/100000000000000000000000/y"}]`,
		`[{"op":"add","path":"m/atadata/999999/y","value":1}]`, // json-patch drops the first segment, "/" or not
	}
	for _, opsJSON := range refused {
		var ops []rego.PatchOp
		if err := json.Unmarshal([]byte(opsJSON), &ops); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, _, err := diffPatch(decodeDoc(t, patchTestNode), ops)
		if err == nil || !strings.Contains(err.Error(), "would pad an array to index") || !strings.Contains(err.Error(), "patch operation 0") {
			t.Errorf("%s: got %v, want a refusal naming the operation and the index", opsJSON, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: refused after %v", opsJSON, d)
		}
	}
	// json-patch creates over a null as over a missing member, and pads
	// there too.
	// An empty segment is the object itself to json-patch, not the
	// member "" the walk would find.
	withNulls := decodeDoc(t, `{"metadata":{"x":null},"spec":{"list":[null]},"":{"new":{"999999":{}}}}`)
	for _, opsJSON := range []string{
		`[{"op":"add","path":"/metadata/x/999999/y","value":1}]`,
		`[{"op":"add","path":"/spec/list/0/999999/y","value":1}]`,
		`[{"op":"add","path":"//new/999999/y","value":1}]`,
	} {
		var ops []rego.PatchOp
		if err := json.Unmarshal([]byte(opsJSON), &ops); err != nil {
			t.Fatal(err)
		}
		if _, _, err := diffPatch(withNulls, ops); err == nil || !strings.Contains(err.Error(), "would pad an array to index 999999") {
			t.Errorf("%s under a null: got %v, want a refusal", opsJSON, err)
		}
	}
	allowed := []string{
		`[{"op":"add","path":"/metadata/labels/8080","value":"1"}]`,                          // a new key at the end is a key
		`[{"op":"replace","path":"/metadata/labels/a~1b","value":"9"}]`,                      // existing
		`[{"op":"add","path":"/spec/services/1/protocol","value":"TCP"}]`,                    // an existing element
		`[{"op":"add","path":"/spec/extra/3/name","value":"a"}]`,                             // a new array, 3 nulls: json-patch's own rule
		`[{"op":"add","path":"/metadata/annotations/99999999","value":"x"}]`,                 // a key of an existing object
		`[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`, // the bundled patch
	}
	for _, opsJSON := range allowed {
		var ops []rego.PatchOp
		if err := json.Unmarshal([]byte(opsJSON), &ops); err != nil {
			t.Fatal(err)
		}
		if _, _, err := diffPatch(decodeDoc(t, patchTestNode), ops); err != nil {
			t.Errorf("%s: %v", opsJSON, err)
		}
	}
}
