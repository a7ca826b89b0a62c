package policies

import (
	"path"
	"slices"
	"strings"

	"github.com/quantumnode/qn-admission/internal/dirwatch"
	"github.com/quantumnode/qn-admission/policies/pattern"
)

// RegoSuffix names the Rego modules of a policy directory, at any depth.
const RegoSuffix = ".rego"

// IsPolicyFile says whether Load reads the file at rel (slash-separated,
// relative to the policy directory): roles.yaml and the data files at the
// top, Rego modules, pattern policies and other YAML (which may hold
// policies of other dialects) at any depth, but YAML under a fixtures
// directory (qnctl's cases: objects, never policies). Only these are
// hashed to notice a change and to name a revision, so a checkout that
// also holds a repository's documentation, fixtures or build output (100,000
// such files cost an 11 s start and most of a core idle when every file was
// hashed) costs a listing of their names. A new kind of file Load reads is
// named here too; TestEveryFileLoadReadsIsAPolicyFile holds the two
// together.
func IsPolicyFile(rel string) bool {
	base := path.Base(rel)
	if !strings.Contains(rel, "/") && (base == RolesFile || slices.Contains(DataFiles, base)) {
		return true
	}
	if strings.HasSuffix(base, RegoSuffix) || strings.HasSuffix(base, pattern.FileSuffix) {
		return true
	}
	return isDialectFile(rel) && !isFixtureDir(rel)
}

// Fingerprint is the content hash of the policy files in dir
// (IsPolicyFile): what a reload compares, and what qn-webhook's sync lag
// samples.
func Fingerprint(dir string) (string, error) {
	return dirwatch.FingerprintOf(dir, IsPolicyFile)
}
