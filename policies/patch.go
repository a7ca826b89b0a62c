package policies

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"gomodules.xyz/jsonpatch/v2"

	"github.com/quantumnode/qn-admission/rego"
)

// diffPatch applies the policies' operations to object and returns the
// JSONPatch from the object as sent to the object as patched. Going through
// the diff means a no-op (a label already set) yields no patch, and adds
// under a missing parent (no metadata.labels yet) create the parent.
//
// Only the smallest object of the document that holds every operation's
// target is encoded, patched and diffed (metadata.labels for the bundled
// managed-by label): parts no operation reaches cannot differ, so the
// patch is the same as the whole document's, at a fraction of the cost.
func diffPatch(decoded map[string]any, ops []rego.PatchOp) ([]byte, int, error) {
	if len(ops) == 0 {
		return nil, 0, nil
	}
	if decoded == nil {
		return nil, 0, fmt.Errorf("policies proposed %d patch operations but the request carries no object", len(ops))
	}
	scope := patchScopeOf(decoded, ops)
	rel := ops
	if scope.raw != "" {
		rel = make([]rego.PatchOp, len(ops))
		for i, op := range ops {
			rel[i] = op
			rel[i].Path = op.Path[len(scope.raw):]
			if op.From != "" {
				rel[i].From = op.From[len(scope.raw):]
			}
		}
	}
	diff, direct := directPatch(scope.object, rel)
	var err error
	if !direct {
		diff, err = applyAndDiff(scope.object, rel)
	}
	if err != nil {
		// Name the operations as the policies wrote them, not as scoped.
		opsJSON, _ := json.Marshal(ops)
		return nil, 0, fmt.Errorf("%w (operations %s)", err, opsJSON)
	}
	if len(diff) == 0 {
		return nil, 0, nil
	}
	for i := range diff {
		diff[i].Path = scope.canonical + diff[i].Path
	}
	patch, err := json.Marshal(diff)
	return patch, len(diff), err
}

// applyAndDiff applies ops to object and diffs the result with object.
func applyAndDiff(object map[string]any, ops []rego.PatchOp) (diff []jsonpatch.Operation, err error) {
	defer func() {
		// Whatever else the library fails on is the policies' patch
		// failing, answered like any evaluation error, not a crash.
		if p := recover(); p != nil {
			hint := ""
			for _, op := range ops {
				if op.Op == "test" && op.Value == nil {
					// json-patch dereferences the missing value when
					// the tested path exists.
					hint = " (a test operation has no value)"
				}
			}
			diff, err = nil, fmt.Errorf("apply patch operations: json-patch failed: %v%s", p, hint)
		}
	}()
	if err := checkPatchIndexes(object, ops); err != nil {
		return nil, err
	}
	doc, err := json.Marshal(object)
	if err != nil {
		return nil, fmt.Errorf("encode object for patching: %w", err)
	}
	opsJSON, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encode patch operations: %w", err)
	}
	p, err := jsonpatchapply.DecodePatch(opsJSON)
	if err != nil {
		return nil, fmt.Errorf("decode patch operations: %w", err)
	}
	opts := jsonpatchapply.NewApplyOptions()
	opts.EnsurePathExistsOnAdd = true
	patched, err := p.ApplyWithOptions(doc, opts)
	if err != nil {
		return nil, fmt.Errorf("apply patch operations: %w", err)
	}
	if diff, err = jsonpatch.CreatePatch(doc, patched); err != nil {
		return nil, fmt.Errorf("diff patched object: %w", err)
	}
	return diff, nil
}

// maxPatchArrayIndex bounds the array indices a policy's patch may make
// json-patch pad. An add under a path that does not exist makes json-patch
// create it, and where the next segment is a number it creates an array
// padded with nulls up to that index, copying the array once per null:
// "/spec/x/999999/y" took minutes of CPU after the policies had answered,
// beyond any evaluation deadline. No object the webhook judges holds
// arrays near this long (the CRD caps spec.services at 256).
const maxPatchArrayIndex = 4096

// checkPatchIndexes refuses operations that would pad an array past
// maxPatchArrayIndex, saying which operation and where. It walks each
// pointer through the object as sent: from the first segment that does
// not exist on, every number would index an array json-patch creates or
// pads. Numbers that name object keys which exist (a label "8080") are
// keys, not indices, and pass.
func checkPatchIndexes(object map[string]any, ops []rego.PatchOp) error {
	for i, op := range ops {
		for _, pointer := range []string{op.Path, op.From} {
			if seg, ok := paddedIndexPast(object, pointer, maxPatchArrayIndex); !ok {
				return fmt.Errorf("patch operation %d (%s %q) would pad an array to index %s, above the largest a patch may create (%d)", i, op.Op, pointer, seg, maxPatchArrayIndex)
			}
		}
	}
	return nil
}

// paddedIndexPast walks pointer through doc and returns the first segment
// that would make json-patch pad an array beyond max, with ok false.
func paddedIndexPast(doc map[string]any, pointer string, max uint64) (string, bool) {
	// json-patch drops whatever precedes the first "/" ("0/a/1" walks a,
	// then 1), so the walk does too.
	parts := strings.Split(pointer, "/")[1:]
	if slices.Contains(parts, "") {
		// json-patch reads an empty segment as the object it is in, or
		// creates it, or its walk skips it: wherever the walk goes,
		// no number in the pointer may be past the bound.
		return numberPast(parts, max)
	}
	var node any = doc
	for k, seg := range parts {
		switch n := node.(type) {
		case map[string]any:
			// json-patch takes a null member for a missing one and
			// creates the path in its place.
			if child := n[unescapePointer(seg)]; child != nil {
				node = child
				continue
			}
		case []any:
			if idx, err := strconv.ParseUint(seg, 10, 64); err == nil && idx < uint64(len(n)) {
				if node = n[idx]; node == nil {
					// A null element, created over as a missing member is.
					return numberPast(parts[k+1:], max)
				}
				continue
			}
			// Missing element: from here on the path is created.
			return numberPast(parts[k:], max)
		default:
			return "", true // a scalar: json-patch refuses the path itself
		}
		// A missing (or null) member: the rest of the path is created,
		// arrays where a segment is a number.
		return numberPast(parts[k+1:], max)
	}
	return "", true
}

func numberPast(segs []string, max uint64) (string, bool) {
	for _, seg := range segs {
		if seg == "" || strings.Trim(seg, "0123456789") != "" {
			continue
		}
		if n, err := strconv.ParseUint(seg, 10, 64); err != nil || n > max {
			return seg, false
		}
	}
	return "", true
}

// patchScope is the object of the document that every operation falls
// strictly inside, and its JSON pointer as the operations spell it (raw)
// and as a diff spells it (canonical escaping); both "" for the whole
// document.
type patchScope struct {
	object         map[string]any
	raw, canonical string
}

// patchScopeOf walks each operation's pointers (path, and from for move
// and copy) through existing objects, down to the parent of the target,
// and keeps the part all walks share. Arrays end a walk: their indices
// (and "-") are json-patch's to interpret.
func patchScopeOf(doc map[string]any, ops []rego.PatchOp) patchScope {
	var common []string // raw segments shared by every walk so far
	first := true
	limit := func(pointer string) bool {
		segs, ok := objectAncestors(doc, pointer)
		if !ok {
			return false
		}
		if first {
			common, first = segs, false
			return true
		}
		n := 0
		for n < len(common) && n < len(segs) && common[n] == segs[n] {
			n++
		}
		common = common[:n]
		return true
	}
	for _, op := range ops {
		if !limit(op.Path) || (op.From != "" && !limit(op.From)) {
			return patchScope{object: doc}
		}
	}
	s := patchScope{object: doc}
	var raw, canonical strings.Builder
	for _, seg := range common {
		s.object = s.object[unescapePointer(seg)].(map[string]any)
		raw.WriteString("/" + seg)
		canonical.WriteString("/" + escapePointer(unescapePointer(seg)))
	}
	s.raw, s.canonical = raw.String(), canonical.String()
	return s
}

// objectAncestors returns the raw segments of pointer's ancestors that
// exist in doc as objects, from the top. ok is false, and the whole
// document is patched, for a pointer that does not start with "/" (the
// whole document, or one json-patch refuses) and for one with an empty
// key anywhere: json-patch reads an empty key as the object itself where
// it knows the object, which differs between a document's root and a part
// of it.
func objectAncestors(doc map[string]any, pointer string) (segs []string, ok bool) {
	if !strings.HasPrefix(pointer, "/") {
		return nil, false
	}
	parts := strings.Split(pointer[1:], "/")
	if slices.Contains(parts, "") {
		return nil, false
	}
	node := doc
	for _, seg := range parts[:len(parts)-1] {
		child, isObject := node[unescapePointer(seg)].(map[string]any)
		if !isObject {
			break
		}
		segs = append(segs, seg)
		node = child
	}
	return segs, true
}

// JSON pointer escaping (RFC 6901): the decoder is json-patch's, the
// encoder the diff's.
var (
	pointerDecoder = strings.NewReplacer("~1", "/", "~0", "~")
	pointerEncoder = strings.NewReplacer("~", "~0", "/", "~1")
)

func unescapePointer(seg string) string { return pointerDecoder.Replace(seg) }

func escapePointer(key string) string { return pointerEncoder.Replace(key) }
