package policies

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	kjson "sigs.k8s.io/json"

	"github.com/quantumnode/qn-admission/rego"
)

// opBytes is each operation of a patch as the webhook sends it, sorted:
// CreatePatch orders members by map iteration, the direct path by key.
func opBytes(t testing.TB, ops []jsonpatch.Operation) []string {
	t.Helper()
	out := make([]string, len(ops))
	for i := range ops {
		b, err := json.Marshal(&ops[i])
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	slices.Sort(out)
	return out
}

// sameAsJSONPatch holds directPatch to json-patch's apply and
// CreatePatch's diff: where the direct path answers, json-patch succeeds
// with byte-identical operations; where json-patch fails, the direct path
// declines (and diffPatch takes json-patch's path, error and all). The
// object is left as it was. It reports whether the direct path answered
// and whether json-patch succeeded.
func sameAsJSONPatch(t testing.TB, doc map[string]any, ops []rego.PatchOp) (direct, succeeded bool) {
	t.Helper()
	before, _ := json.Marshal(doc)
	got, direct := directPatch(doc, ops)
	if after, _ := json.Marshal(doc); string(after) != string(before) {
		t.Fatalf("directPatch changed the object: %s, now %s", before, after)
	}
	want, wantErr := applyAndDiff(doc, ops)
	if !direct {
		return false, wantErr == nil
	}
	opsJSON, _ := json.Marshal(ops)
	if wantErr != nil {
		t.Fatalf("on %s with %s: json-patch fails (%v), the direct path answered %v", before, opsJSON, wantErr, got)
	}
	if a, b := opBytes(t, want), opBytes(t, got); !slices.Equal(a, b) {
		t.Fatalf("on %s with %s:\njson-patch %v\ndirect     %v", before, opsJSON, a, b)
	}
	return true, true
}

func TestDirectPatchAnswers(t *testing.T) {
	doc := decodeDoc(t, patchTestNode)
	cases := []struct {
		name, ops, patch string // patch "-": the direct path declines
	}{
		{"label added", `[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`,
			`[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`},
		{"label already set", `[{"op":"add","path":"/metadata/labels/a~1b","value":"1"}]`, `[]`},
		{"missing parents", `[{"op":"add","path":"/metadata/x/y~0z/w","value":null}]`, `-`},
		{"missing parents, a value", `[{"op":"add","path":"/metadata/x/y/w~0","value":{"n":1e21}}]`,
			`[{"op":"add","path":"/metadata/x","value":{"y":{"w~":{"n":1e+21}}}}]`},
		{"an escaped missing parent", `[{"op":"add","path":"/metadata/x~1y/z","value":1}]`, `-`},
		{"replace a value by an equal one", `[{"op":"replace","path":"/spec/hardware","value":{"arch":"arm64"}}]`, `[]`},
		{"replace an object diffs it", `[{"op":"replace","path":"/spec/hardware","value":{"cpu":2}}]`,
			`[{"op":"add","path":"/spec/hardware/cpu","value":2},{"op":"remove","path":"/spec/hardware/arch"}]`},
		{"add then remove", `[{"op":"add","path":"/metadata/labels/z","value":"1"},{"op":"remove","path":"/metadata/labels/z"}]`, `[]`},
		{"remove absent", `[{"op":"remove","path":"/metadata/labels/absent"}]`, `-`},
		{"replace absent", `[{"op":"replace","path":"/metadata/labels/absent","value":"x"}]`, `-`},
		{"through a scalar", `[{"op":"add","path":"/metadata/name/x","value":"x"}]`, `-`},
		{"through an array", `[{"op":"add","path":"/spec/services/0/name","value":"x"}]`, `-`},
		{"an index under a missing parent", `[{"op":"add","path":"/metadata/x/0","value":"x"}]`, `-`},
		{"move", `[{"op":"move","from":"/metadata/labels/a~1b","path":"/metadata/labels/c"}]`, `-`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ops []rego.PatchOp
			if err := json.Unmarshal([]byte(c.ops), &ops); err != nil {
				t.Fatal(err)
			}
			if direct, _ := sameAsJSONPatch(t, doc, ops); direct != (c.patch != "-") {
				t.Fatalf("direct path taken: %v", direct)
			}
			if c.patch == "-" {
				return
			}
			got, _ := directPatch(doc, ops)
			var wantOps []jsonpatch.Operation
			if err := json.Unmarshal([]byte(c.patch), &wantOps); err != nil {
				t.Fatal(err)
			}
			// Numbers as written in the case.
			for i := range wantOps {
				if wantOps[i].Value == nil {
					continue
				}
				b, _ := json.Marshal(wantOps[i].Value)
				wantOps[i].Value = json.RawMessage(b)
			}
			if a, b := opBytes(t, got), opBytes(t, wantOps); !slices.Equal(a, b) {
				t.Errorf("patch %v, want %v", a, b)
			}
		})
	}
}

// Keys that need escaping, unicode, numbers that read alike, empty keys.
var directKeys = []string{"metadata", "labels", "a", "b", "a/b", "t~x", "~1", "~0/", "-", "0", "7", "8080", "", "ünï", "日本", "<&>", "1e21"}

// directNumbers are numbers JSON writes in ways that matter to the diff:
// 1e21 switches to exponent form, -0 is not 0, 2^53+1 is not a float64,
// 1.0 is not 1 in CreatePatch's comparison of json.Numbers.
var directNumbers = []any{0.0, math.Copysign(0, -1), 1.0, 1.5, 1e21, 1e20, 123456789012345678.0, int64(1<<53 + 1), int64(-3), 3,
	json.Number("1.0"), json.Number("1"), json.Number("1e21"), json.Number("1e+21"), json.Number("-0"), json.Number("12345678901234567890")}

var directValues = jsonValues{keys: directKeys, numbers: directNumbers}

func directValue(rng *rand.Rand, depth int, object bool) any {
	return directValues.value(rng, depth, object)
}

// directDoc is a random object as the webhook holds it: decoded from JSON
// with integers kept (sigs.k8s.io/json), or as encoding/json decodes it.
func directDoc(t testing.TB, rng *rand.Rand) map[string]any {
	b, err := json.Marshal(directValue(rng, 0, true))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if rng.IntN(2) == 0 {
		err = kjson.UnmarshalCaseSensitivePreserveInts(b, &doc)
	} else {
		err = json.Unmarshal(b, &doc)
	}
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// objectPointers are the pointers of the objects in v.
func objectPointers(v any, at string, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		*out = append(*out, at)
		for k, c := range v {
			objectPointers(c, at+"/"+escapePointer(k), out)
		}
	case []any:
		for i, c := range v {
			objectPointers(c, at+"/"+strconv.Itoa(i), out)
		}
	}
}

// directPointer is mostly a pointer into an object, sometimes into an
// array or a scalar.
func directPointer(rng *rand.Rand, pointers, objects []string) string {
	p := pointers[rng.IntN(len(pointers))]
	if rng.IntN(4) != 0 {
		p = objects[rng.IntN(len(objects))]
	}
	key := func() string { return escapePointer(directKeys[rng.IntN(len(directKeys))]) }
	switch rng.IntN(10) {
	case 0, 1, 2, 3: // a new member, or an existing one's child
		return p + "/" + key()
	case 4: // under missing parents
		return p + "/new/" + key() + "/" + key()
	case 5: // indices, below and past the bound, under a missing parent
		return p + []string{"/new/3/x", "/new/-/x", "/new/4097/x", "/new/100000000000000000000000/x", "/new/+1/x"}[rng.IntN(5)]
	case 6: // raw, possibly unusual escapes
		return p + []string{"/a~1b", "/t~0x", "/~01", "/~2", "/-"}[rng.IntN(5)]
	}
	return p
}

func directOp(rng *rand.Rand, pointers, objects []string) rego.PatchOp {
	// Mostly what the direct path answers, some of what it leaves to
	// json-patch.
	kinds := []string{"add", "add", "add", "add", "replace", "replace", "remove", "remove", "move", "test"}
	op := rego.PatchOp{Op: kinds[rng.IntN(len(kinds))], Path: directPointer(rng, pointers, objects)}
	switch op.Op {
	case "add", "replace", "test":
		for op.Value == nil && rng.IntN(8) != 0 {
			op.Value = directValue(rng, 1, false)
		}
	case "move":
		op.From = directPointer(rng, pointers, objects)
	}
	return op
}

// Random objects and operation lists: wherever the direct path answers,
// it answers as json-patch and CreatePatch do, byte for byte; and it does
// answer most of them.
func TestDirectPatchMatchesJSONPatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 7))
	const n = 20000
	answered, succeeded := 0, 0
	for i := 0; i < n; i++ {
		var doc map[string]any
		if i%4 == 0 {
			doc = decodeDoc(t, patchTestNode)
		} else {
			doc = directDoc(t, rng)
		}
		var pointers, objects []string
		collectPointers(doc, "", &pointers)
		objectPointers(doc, "", &objects)
		ops := make([]rego.PatchOp, 1+rng.IntN(2)+rng.IntN(2))
		for j := range ops {
			ops[j] = directOp(rng, pointers, objects)
		}
		direct, ok := sameAsJSONPatch(t, doc, ops)
		if direct {
			answered++
		}
		if ok {
			succeeded++
		}
		samePatch(t, doc, ops)
	}
	// Many random lists fail (json-patch's path answers those); of those
	// json-patch applies, the direct path must answer a good share.
	if answered < succeeded/3 {
		t.Errorf("the direct path answered %d of the %d lists json-patch applies: too few to hold it to json-patch", answered, succeeded)
	}
	t.Logf("the direct path answered %d of the %d lists json-patch applies (of %d)", answered, succeeded, n)
}

// FuzzDirectPatchMatchesJSONPatch: any object (integers kept, as the
// webhook decodes it) and any operations.
func FuzzDirectPatchMatchesJSONPatch(f *testing.F) {
	f.Add([]byte(patchTestNode), []byte(`[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`))
	f.Add([]byte(patchTestNode), []byte(`[{"op":"replace","path":"/spec/hardware","value":{"arch":"arm64","n":-0,"m":1e21}},{"op":"remove","path":"/metadata/annotations/qn-role"}]`))
	f.Add([]byte(`{"a":{"b":1.0,"c":null,"d":[1,2]}}`), []byte(`[{"op":"add","path":"/a/b","value":1},{"op":"add","path":"/a/c/x","value":1},{"op":"add","path":"/a/e/f~1g/h","value":{"i":"ü"}}]`))
	f.Add([]byte(`{"a":{}}`), []byte(`[{"op":"add","path":"/a/x/4097/y","value":1},{"op":"add","path":"/a/x/-","value":1}]`))
	f.Fuzz(func(t *testing.T, docJSON, opsJSON []byte) {
		var doc map[string]any
		var ops []rego.PatchOp
		if kjson.UnmarshalCaseSensitivePreserveInts(docJSON, &doc) != nil || doc == nil || len(ops) > 8 {
			return
		}
		dec := json.NewDecoder(strings.NewReader(string(opsJSON)))
		dec.UseNumber() // numbers as the Rego results carry them
		if dec.Decode(&ops) != nil || len(ops) > 8 {
			return
		}
		sameAsJSONPatch(t, doc, ops)
	})
}
