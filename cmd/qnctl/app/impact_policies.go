package app

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// policyRef is one side of an impact comparison: a policy directory, or
// for --base a commit of the Git repository the proposed directory lives
// in, checked out into a temporary directory.
type policyRef struct {
	// Name is how reports name the side: the directory, or "REF (commit
	// SHA) of DIR".
	Name string
	// Dir is the directory to load.
	Dir string
}

// resolveBase turns --base into a directory: an existing directory as it
// is, else a Git ref of the repository that holds proposed, whose copy of
// proposed's path is extracted into a temporary directory (removed by
// cleanup).
func resolveBase(ctx context.Context, base, proposed string) (_ policyRef, cleanup func(), _ error) {
	noop := func() {}
	if st, err := os.Stat(base); err == nil {
		if !st.IsDir() {
			return policyRef{}, noop, usagef("--base %s is a file; give a policy directory or a Git ref", base)
		}
		return policyRef{Name: base, Dir: base}, noop, nil
	}
	in := proposed
	git := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", in}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			msg := strings.TrimSpace(stderr.String())
			if errors.Is(err, exec.ErrNotFound) {
				msg = "git is not installed"
			}
			return nil, fmt.Errorf("git %s: %s", strings.Join(args, " "), msg)
		}
		return out, nil
	}
	prefix, err := git("rev-parse", "--show-prefix")
	if err != nil {
		return policyRef{}, noop, usagef("--base %s is not a directory, and %s is not in a Git repository to read it as a ref of (%v)", base, proposed, err)
	}
	commit, err := git("rev-parse", "--verify", "--quiet", base+"^{commit}")
	if err != nil {
		return policyRef{}, noop, usagef("--base %s is neither a directory nor a commit of the Git repository of %s", base, proposed)
	}
	root, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return policyRef{}, noop, err
	}
	// git archive of a tree path runs from the top: in a subdirectory it
	// would look for the path under that subdirectory.
	in = strings.TrimSpace(string(root))
	sha := strings.TrimSpace(string(commit))
	dir := strings.TrimSuffix(strings.TrimSpace(string(prefix)), "/")
	spec := sha
	if dir != "" {
		spec += ":" + dir
	}
	archive, err := git("archive", "--format=tar", spec)
	if err != nil {
		return policyRef{}, noop, fmt.Errorf("--base %s: %s holds no %s: %v", base, short(sha), orRoot(dir), err)
	}
	tmp, err := os.MkdirTemp("", "qnctl-impact-base-")
	if err != nil {
		return policyRef{}, noop, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	if err := untar(archive, tmp); err != nil {
		cleanup()
		return policyRef{}, noop, fmt.Errorf("--base %s: extract %s of %s: %w", base, orRoot(dir), short(sha), err)
	}
	return policyRef{Name: fmt.Sprintf("%s (commit %s) of %s", base, short(sha), proposed), Dir: tmp}, cleanup, nil
}

func short(sha string) string { return sha[:min(12, len(sha))] }

func orRoot(dir string) string {
	if dir == "" {
		return "the repository's root"
	}
	return dir
}

// untar writes the regular files of a tar archive (what git archive
// writes) under dir, refusing names that would leave it.
func untar(archive []byte, dir string) error {
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(target, data, 0o644); err != nil {
				return err
			}
		}
	}
}
