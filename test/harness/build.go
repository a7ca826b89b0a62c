package harness

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
)

// BuildTags are the build tags the Makefile's BUILD_TAGS gives every
// binary: tests and benchmarks run the binaries as they are shipped.
const BuildTags = "nomsgpack"

// ModuleRoot is the qn-admission checkout this package was built from.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build compiles the main package pkg (relative to the module root, e.g.
// "./cmd/qn-webhook") into dir as the Makefile builds it, and returns the
// binary's path (dir/<last element of pkg>).
func Build(ctx context.Context, dir, pkg string) (string, error) {
	bin := filepath.Join(dir, path.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", BuildTags, "-o", bin, pkg)
	cmd.Dir = ModuleRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}
