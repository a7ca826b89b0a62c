package rego

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
)

//go:embed bundle
var bundled embed.FS

// Bundled is the default policy directory shipped inside the binary: the
// role table, the QuantumNode policies and their Rego tests. It is what the
// server serves when no --policy-dir is given.
func Bundled() fs.FS {
	sub, err := fs.Sub(bundled, "bundle")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return sub
}

// ReadModules reads every .rego file below the root of fsys, skipping hidden
// entries (Kubernetes ConfigMap and git-sync volumes keep their timestamped
// copies in "..data"-style folders).
func ReadModules(fsys fs.FS) ([]Module, error) {
	var mods []Module
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !strings.HasSuffix(path, ".rego") {
			return nil
		}
		src, err := fs.ReadFile(fsys, path)
		if err != nil {
			return fmt.Errorf("read policy %s: %w", path, err)
		}
		mods = append(mods, Module{Path: path, Source: string(src)})
		return nil
	})
	return mods, err
}
