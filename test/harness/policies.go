package harness

import (
	"io/fs"
	"os"
	"path/filepath"

	"github.com/quantumnode/qn-admission/rego"
)

// WriteBundledPolicies copies the policies bundled in the binaries into
// dir, the layout a user keeps in Git, so a test can change them and watch
// a hot reload.
func WriteBundledPolicies(dir string) error {
	bundled := rego.Bundled()
	return fs.WalkDir(bundled, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, path)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(bundled, path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
