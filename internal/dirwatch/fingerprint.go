package dirwatch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Fingerprint hashes the content a policy set is built from: every regular
// file below dir, by slash-separated relative path and content. Symlinks are
// followed, the root included, so a ConfigMap volume, a git-sync worktree and
// a plain copy of the same files have the same fingerprint.
//
// Entries whose name starts with "." are skipped at every level: kubelet's
// "..data" and "..<timestamp>" directories and git's ".git" and ".worktrees"
// would otherwise count the same files twice, or count history. A dangling
// symlink counts as absent, and a file that vanishes during the walk is
// skipped: either way the change that caused it triggers another look.
func Fingerprint(dir string) (string, error) {
	// Walk the resolved root so a git-sync swap during the walk cannot mix two
	// worktrees: we read one of them, or fail and retry.
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("resolve policy directory %s: %w", dir, err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("policy directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("policy directory %s is not a directory", dir)
	}
	h := sha256.New()
	if err := hashTree(h, root, "", map[string]bool{root: true}); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// hashTree writes one record per regular file below abs: the relative path,
// a NUL (which no file name contains, so records cannot be confused), and the
// file's own SHA-256. ancestors holds the resolved directories on the current
// path, so a symlink that points back up is not followed forever.
func hashTree(h hash.Hash, abs, rel string, ancestors map[string]bool) error {
	entries, err := os.ReadDir(abs)
	if err != nil {
		return fmt.Errorf("read policy directory %s: %w", abs, err)
	}
	for _, e := range entries { // sorted by name, so the order is stable
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(abs, name)
		r := path.Join(rel, name)
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("policy file %s: %w", p, err)
		}
		switch {
		case fi.IsDir():
			real, err := filepath.EvalSymlinks(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("resolve policy directory %s: %w", p, err)
			}
			if ancestors[real] {
				continue
			}
			ancestors[real] = true
			err = hashTree(h, real, r, ancestors)
			delete(ancestors, real)
			if err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			// Only regular files are opened: reading a FIFO or a device
			// left in the directory would block or never end.
			sum, err := hashFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("read policy file %s: %w", p, err)
			}
			fmt.Fprintf(h, "%s\x00%x\n", r, sum)
		}
	}
	return nil
}

func hashFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
