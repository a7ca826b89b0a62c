// Package policyfiles is the one walk over a policy directory that every
// reader of it shares (Rego modules, pattern policies, policy dialects):
// which entries are skipped is decided once.
package policyfiles

import (
	"io/fs"
	"strings"
)

// Walk calls visit, in lexical order, with the path and bytes of every file
// below the root of fsys whose path keep accepts. Hidden entries are
// skipped, files and directories alike: Kubernetes ConfigMap and git-sync
// volumes keep their timestamped copies in "..data"-style folders, and a
// checkout its .git. The first error (a walk's, a read's as an
// *fs.PathError naming the file, or visit's) stops the walk.
func Walk(fsys fs.FS, keep func(path string) bool, visit func(path string, src []byte) error) error {
	return fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !keep(path) {
			return nil
		}
		src, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		return visit(path, src)
	})
}
