package shadow

import (
	"encoding/json"
	"slices"

	"github.com/quantumnode/qn-admission/policies"
)

// AnswerClass names an answer in a word: allowed, warned or denied on the
// validating path, patched or unpatched on the mutating path.
func AnswerClass(path policies.Path, d policies.Decision) string {
	switch {
	case !d.Allowed:
		return "denied"
	case path == policies.PathMutate && len(d.Patch) > 0:
		return "patched"
	case path == policies.PathMutate:
		return "unpatched"
	case len(d.Warnings) > 0:
		return "warned"
	}
	return "allowed"
}

// Agree says two answers to one request are the same: admitted or not,
// with the same code and message, the same warnings and the same patch
// (as a set of operations).
func Agree(a, b policies.Decision) bool {
	if a.Allowed != b.Allowed || a.Code != b.Code || a.Message != b.Message {
		return false
	}
	x, y := slices.Clone(a.Warnings), slices.Clone(b.Warnings)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y) && samePatchOps(a.Patch, b.Patch)
}

// samePatchOps compares two JSONPatch documents as sets of operations.
func samePatchOps(a, b []byte) bool {
	if string(a) == string(b) {
		return true
	}
	ops := func(p []byte) []string {
		var list []json.RawMessage
		_ = json.Unmarshal(p, &list)
		out := make([]string, 0, len(list))
		for _, op := range list {
			var v any
			_ = json.Unmarshal(op, &v)
			c, _ := json.Marshal(v) // maps marshal with sorted keys
			out = append(out, string(c))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(ops(a), ops(b))
}
