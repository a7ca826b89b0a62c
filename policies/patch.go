package policies

import (
	"encoding/json"
	"fmt"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"gomodules.xyz/jsonpatch/v2"

	"github.com/quantumnode/qn-admission/rego"
)

// diffPatch applies the policies' operations to object and returns the
// JSONPatch from the object as sent to the object as patched. Going through
// the diff means a no-op (a label already set) yields no patch, and adds
// under a missing parent (no metadata.labels yet) create the parent.
func diffPatch(decoded map[string]any, ops []rego.PatchOp) ([]byte, int, error) {
	if len(ops) == 0 {
		return nil, 0, nil
	}
	if decoded == nil {
		return nil, 0, fmt.Errorf("policies proposed %d patch operations but the request carries no object", len(ops))
	}
	// Diff against the object as decoded, so the patch is relative to what
	// policies saw; JSON Patch paths are independent of key order.
	object, err := json.Marshal(decoded)
	if err != nil {
		return nil, 0, fmt.Errorf("encode object for patching: %w", err)
	}
	opsJSON, err := json.Marshal(ops)
	if err != nil {
		return nil, 0, fmt.Errorf("encode patch operations: %w", err)
	}
	p, err := jsonpatchapply.DecodePatch(opsJSON)
	if err != nil {
		return nil, 0, fmt.Errorf("decode patch operations %s: %w", opsJSON, err)
	}
	opts := jsonpatchapply.NewApplyOptions()
	opts.EnsurePathExistsOnAdd = true
	patched, err := p.ApplyWithOptions(object, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("apply patch operations %s: %w", opsJSON, err)
	}
	diff, err := jsonpatch.CreatePatch(object, patched)
	if err != nil {
		return nil, 0, fmt.Errorf("diff patched object: %w", err)
	}
	if len(diff) == 0 {
		return nil, 0, nil
	}
	patch, err := json.Marshal(diff)
	return patch, len(diff), err
}
