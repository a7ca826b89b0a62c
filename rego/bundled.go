package rego

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"github.com/quantumnode/qn-admission/internal/policyfiles"
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
	err := policyfiles.Walk(fsys, func(path string) bool { return strings.HasSuffix(path, ".rego") }, func(path string, src []byte) error {
		mods = append(mods, Module{Path: path, Source: string(src)})
		return nil
	})
	if err != nil {
		err = fmt.Errorf("read policy: %w", err)
	}
	return mods, err
}
