package dirwatch

import (
	"path/filepath"
)

// WorktreeCommit returns the commit a git-sync checkout serves at dir, or
// "" when dir is not inside one. git-sync (v4) checks every commit out into
// <root>/.worktrees/<commit> and swaps a link to it, so the commit is the
// name of the worktree dir resolves into; no git files are read. A
// subdirectory of the checkout has the checkout's commit. Callers name other
// directories by their content hash (Fingerprint).
func WorktreeCommit(dir string) string {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	for p := real; ; p = filepath.Dir(p) {
		parent := filepath.Dir(p)
		if parent == p {
			return ""
		}
		if filepath.Base(parent) == ".worktrees" && isCommitHash(filepath.Base(p)) {
			return filepath.Base(p)
		}
	}
}

// isCommitHash reports whether s is a full SHA-1 or SHA-256 object name.
func isCommitHash(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
