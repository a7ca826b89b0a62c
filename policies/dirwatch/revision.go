package dirwatch

import (
	"bufio"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Revision names the content of dir by its git commit (the full hash) when
// dir is, or resolves through symlinks to, the top of a git checkout or
// worktree, such as a git-sync link. It reads git's files directly (a ".git"
// directory, or a ".git" file saying "gitdir: <path>"; HEAD detached or a
// branch resolved through loose refs or packed-refs), so the server image
// needs no git binary.
//
// It returns "" whenever the answer is not certain: a plain directory, a
// subdirectory of a checkout, a missing gitdir, or a reftable repository.
// Callers then name the content by a hash instead. A checkout edited in place
// keeps its commit, so the content hash remains the truth for change detection.
func Revision(dir string) string {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	gitDir := findGitDir(root)
	if gitDir == "" {
		return ""
	}
	// A linked worktree keeps HEAD in its own gitdir but shares branches with
	// the main repository, which its "commondir" file points to.
	commonDir := gitDir
	if c, err := readSmall(filepath.Join(gitDir, "commondir")); err == nil && c != "" {
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitDir, c)
		}
		commonDir = c
	}
	head, err := readSmall(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return ""
	}
	// Bounded, because a symbolic ref may point at another one (or at itself).
	for range 8 {
		name, symbolic := strings.CutPrefix(head, "ref:")
		if !symbolic {
			if isCommitHash(head) {
				return strings.ToLower(head)
			}
			return ""
		}
		name = strings.TrimSpace(name)
		// fs.ValidPath refuses "..", so a crafted ref cannot read outside
		// the git directory.
		if !strings.HasPrefix(name, "refs/") || !fs.ValidPath(name) {
			return ""
		}
		if head = readRef(gitDir, commonDir, name); head == "" {
			return ""
		}
	}
	return ""
}

// findGitDir returns the git directory of a checkout rooted at root, or "".
// A relative "gitdir:" is relative to root, which is already resolved: git-sync
// writes "gitdir: ../.git/worktrees/<hash>" so that other containers can mount
// the volume elsewhere, and that path is only right from the real worktree.
func findGitDir(root string) string {
	dotGit := filepath.Join(root, ".git")
	fi, err := os.Stat(dotGit)
	if err != nil {
		return ""
	}
	if fi.IsDir() {
		return dotGit
	}
	if !fi.Mode().IsRegular() {
		return ""
	}
	content, err := readSmall(dotGit)
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(content, "\n")
	gitDir, ok := strings.CutPrefix(first, "gitdir:")
	if !ok {
		return ""
	}
	gitDir = strings.TrimSpace(gitDir)
	if gitDir == "" {
		return ""
	}
	if !filepath.IsAbs(gitDir) {
		gitDir = filepath.Join(root, gitDir)
	}
	if fi, err := os.Stat(gitDir); err != nil || !fi.IsDir() {
		return ""
	}
	return gitDir
}

// readRef reads a ref as git does: a loose file first (in the worktree's own
// gitdir, then the shared one), then packed-refs, where "git gc" moves refs.
func readRef(gitDir, commonDir, name string) string {
	for _, d := range []string{gitDir, commonDir} {
		if v, err := readSmall(filepath.Join(d, filepath.FromSlash(name))); err == nil && v != "" {
			return v
		}
	}
	f, err := os.Open(filepath.Join(commonDir, "packed-refs"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		// "#" starts the header, "^" the peeled commit of the tag above.
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		hash, ref, ok := strings.Cut(line, " ")
		if ok && strings.TrimSpace(ref) == name {
			return hash
		}
	}
	return ""
}

// readSmall reads a git metadata file (HEAD, a loose ref, a .git file). They
// are a line long; the cap keeps a wrong path from reading a large file.
func readSmall(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// isCommitHash accepts SHA-1 (40) and SHA-256 (64) object names.
func isCommitHash(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
