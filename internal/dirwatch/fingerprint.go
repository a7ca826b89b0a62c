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
	"syscall"
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
// file's own SHA-256 (other entries, such as a FIFO, by their type, never
// opened). ancestors holds the resolved directories on the current
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
		default:
			// A FIFO, device or socket is never opened, but its arrival
			// is a change: the load that follows refuses it and says so,
			// where ignoring it would leave it unreported.
			fmt.Fprintf(h, "%s\x00%s\n", r, fi.Mode().Type())
		}
	}
	return nil
}

// hashContentLimit is the largest file whose content is hashed. No policy
// file is near it (a load refuses files over --max-policy-file-bytes); a
// larger file, say a sparse gigabyte left in the directory, is recorded by
// its size, modification time and inode instead of costing a second of
// CPU at every look. Any write to it still changes the fingerprint.
const hashContentLimit = 64 << 20

func hashFile(p string) ([]byte, error) {
	// O_NONBLOCK: a file swapped for a FIFO since its Stat must not make
	// the open wait for a writer (the look, and the reloads behind it,
	// would wait for good).
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	switch {
	case !fi.Mode().IsRegular():
		fmt.Fprintf(h, "not a regular file: %s", fi.Mode())
	case fi.Size() > hashContentLimit:
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(h, "large file: %d bytes, modified %d, inode %d", fi.Size(), fi.ModTime().UnixNano(), ino)
	default:
		if _, err := io.Copy(h, io.LimitReader(f, hashContentLimit+1)); err != nil {
			return nil, err
		}
	}
	return h.Sum(nil), nil
}
