package policies

import (
	"encoding/json"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gomodules.xyz/jsonpatch/v2"

	"github.com/quantumnode/qn-admission/rego"
)

// directPatch is applyAndDiff for the operations policies write almost
// always: add, replace or remove of a member of an object (a label, an
// annotation, a field under spec). It applies them to copies of the maps
// they touch and diffs only those, instead of encoding the object and the
// operations, decoding both in json-patch, applying, encoding the result
// and decoding both documents again for the diff.
//
// ok is false, and the caller takes json-patch's path, for anything this
// does not answer exactly as that path would: other operations, a pointer
// with an empty segment or not starting with "/", a walk through an array,
// null or scalar, a parent json-patch would create as an array, a value
// whose JSON is not a plain image of it (invalid UTF-8, NaN, unknown Go
// types), and every error (json-patch's path words it).
// The diff is CreatePatch's (gomodules.xyz/jsonpatch), operation for
// operation; members are visited in key order where CreatePatch follows
// map iteration, so the same patch comes out in a stable order.
// TestDirectPatchMatchesJSONPatch and FuzzDirectPatchMatchesJSONPatch
// hold the two paths to the same answers.
func directPatch(object map[string]any, ops []rego.PatchOp) ([]jsonpatch.Operation, bool) {
	for _, op := range ops {
		switch op.Op {
		case "add", "replace":
			if op.Value == nil || !plainJSON(op.Value) {
				// A nil value is left out of the encoded operation,
				// which json-patch then reads its own way.
				return nil, false
			}
		case "remove":
		default:
			return nil, false
		}
		if !strings.HasPrefix(op.Path, "/") || !utf8.ValidString(op.Path) {
			return nil, false
		}
	}
	// The bound on padded arrays is judged on the object as sent, as
	// json-patch's path does, before any operation applies.
	if checkPatchIndexes(object, ops) != nil {
		return nil, false
	}
	patched := object
	for i := range ops {
		segs := strings.Split(ops[i].Path[1:], "/")
		if slices.Contains(segs, "") {
			return nil, false
		}
		var ok bool
		if patched, ok = applyMemberOp(patched, segs, &ops[i]); !ok {
			return nil, false
		}
	}
	return diffObjects(object, patched, "", nil)
}

// applyMemberOp applies op at the raw pointer segments segs below m and
// returns the new m; m and every map below it are left as they were.
func applyMemberOp(m map[string]any, segs []string, op *rego.PatchOp) (map[string]any, bool) {
	key := unescapePointer(segs[0])
	child, exists := m[key]
	if len(segs) == 1 {
		if !exists && op.Op != "add" {
			return nil, false // nothing to replace or remove: json-patch's error
		}
		out := maps.Clone(m)
		if op.Op == "remove" {
			delete(out, key)
		} else {
			out[key] = op.Value
		}
		return out, true
	}
	var sub map[string]any
	switch {
	case exists:
		var isObject bool
		if sub, isObject = child.(map[string]any); !isObject {
			return nil, false
		}
	case op.Op != "add" || indexLike(segs[1]) || key != segs[0]:
		// json-patch creates missing parents only for add, an array
		// where the next segment reads as an index, and under the
		// segment as written, not unescaped, which its walk then misses.
		return nil, false
	default:
		sub = map[string]any{}
	}
	sub, ok := applyMemberOp(sub, segs[1:], op)
	if !ok {
		return nil, false
	}
	out := maps.Clone(m)
	out[key] = sub
	return out, true
}

// indexLike reports a segment json-patch's path creation may read as an
// array index.
func indexLike(seg string) bool {
	if seg == "-" || strings.Trim(seg, "0123456789") == "" {
		return true
	}
	_, err := strconv.Atoi(seg)
	return err == nil
}

// plainJSON reports whether v encodes to JSON that decodes to v again, up
// to the type of its numbers: the values the direct path may compare and
// hand on without the round trip.
func plainJSON(v any) bool {
	switch v := v.(type) {
	case nil, bool, int, int32, int64, uint, uint32, uint64:
		return true
	case string:
		return utf8.ValidString(v)
	case float64:
		return !math.IsNaN(v) && !math.IsInf(v, 0)
	case json.Number:
		_, ok := numberText(v)
		return ok
	case map[string]any:
		for k, e := range v {
			if !utf8.ValidString(k) || !plainJSON(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range v {
			if !plainJSON(e) {
				return false
			}
		}
		return true
	}
	return false
}

// numberText is a number as its JSON carries it, which is what CreatePatch
// compares (it decodes with UseNumber).
func numberText(v any) (string, bool) {
	switch v := v.(type) {
	case int64:
		return strconv.FormatInt(v, 10), true
	case json.Number:
		b, err := json.Marshal(v)
		// An empty Number encodes as 0: not the text it holds.
		return string(v), err == nil && string(b) == string(v)
	}
	b, err := json.Marshal(v)
	return string(b), err == nil
}

type jsonKind int

const (
	kindInvalid jsonKind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindObject
	kindArray
)

func kindOf(v any) jsonKind {
	switch v.(type) {
	case nil:
		return kindNull
	case bool:
		return kindBool
	case string:
		return kindString
	case float64, int64, json.Number, int, int32, uint, uint32, uint64:
		return kindNumber
	case map[string]any:
		return kindObject
	case []any:
		return kindArray
	}
	return kindInvalid
}

// unchanged reports, cheaply, values the patch left alone: the same map or
// array (the direct path copies what it changes), the same scalar.
func unchanged(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		return ok && reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case float64:
		// By bits: -0 == 0, but JSON writes them apart.
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case nil, bool, string, int64, json.Number:
		return a == b
	}
	return false
}

// diffObjects is CreatePatch's diff of two objects at path p: adds and
// changes in b's keys, then removals of a's keys b lacks.
func diffObjects(a, b map[string]any, p string, out []jsonpatch.Operation) ([]jsonpatch.Operation, bool) {
	var changed, removed []string
	for k, bv := range b {
		if av, ok := a[k]; !ok || !unchanged(av, bv) {
			changed = append(changed, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			removed = append(removed, k)
		}
	}
	slices.Sort(changed)
	slices.Sort(removed)
	var ok bool
	for _, k := range changed {
		at := p + "/" + escapePointer(k)
		av, found := a[k]
		if !found {
			out = append(out, jsonpatch.NewOperation("add", at, b[k]))
			continue
		}
		if out, ok = diffValues(av, b[k], at, out); !ok {
			return nil, false
		}
	}
	for _, k := range removed {
		out = append(out, jsonpatch.NewOperation("remove", p+"/"+escapePointer(k), nil))
	}
	return out, true
}

// diffValues is CreatePatch's handleValues on Go values: a change of JSON
// type replaces, objects and arrays are diffed member by member.
func diffValues(a, b any, p string, out []jsonpatch.Operation) ([]jsonpatch.Operation, bool) {
	ka, kb := kindOf(a), kindOf(b)
	if ka == kindInvalid || kb == kindInvalid {
		return nil, false
	}
	if ka != kb {
		return append(out, jsonpatch.NewOperation("replace", p, b)), true
	}
	switch ka {
	case kindObject:
		return diffObjects(a.(map[string]any), b.(map[string]any), p, out)
	case kindArray:
		at, bt := a.([]any), b.([]any)
		n := min(len(at), len(bt))
		for i := len(at) - 1; i >= n; i-- {
			out = append(out, jsonpatch.NewOperation("remove", p+"/"+strconv.Itoa(i), nil))
		}
		for i := n; i < len(bt); i++ {
			out = append(out, jsonpatch.NewOperation("add", p+"/"+strconv.Itoa(i), bt[i]))
		}
		var ok bool
		for i := 0; i < n; i++ {
			if out, ok = diffValues(at[i], bt[i], p+"/"+strconv.Itoa(i), out); !ok {
				return nil, false
			}
		}
		return out, true
	case kindNumber:
		ta, okA := numberText(a)
		tb, okB := numberText(b)
		if !okA || !okB {
			return nil, false
		}
		if ta != tb {
			out = append(out, jsonpatch.NewOperation("replace", p, b))
		}
	case kindString, kindBool:
		if a != b {
			out = append(out, jsonpatch.NewOperation("replace", p, b))
		}
	}
	return out, true
}
