package dirwatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	sha1 = "1111111111111111111111111111111111111111"
	sha2 = "2222222222222222222222222222222222222222"
)

func TestWorktreeCommit(t *testing.T) {
	sha256 := strings.Repeat("ab", 32)
	cases := map[string]struct {
		setup func(t *testing.T, dir string) string // returns the path to ask about
		want  string
	}{
		"a plain directory has no commit": {
			setup: plainDir,
			want:  "",
		},
		"a git-sync link names the commit of its worktree": {
			setup: func(t *testing.T, dir string) string {
				g := newGitSyncRoot(t, dir)
				g.sync(t, sha1, basePolicies)
				return g.link
			},
			want: sha1,
		},
		"a subdirectory of a git-sync checkout has the checkout's commit": {
			setup: func(t *testing.T, dir string) string {
				g := newGitSyncRoot(t, dir)
				g.sync(t, sha1, prefixed("policies/", basePolicies))
				return filepath.Join(g.link, "policies")
			},
			want: sha1,
		},
		"after a sync the link names the new commit": {
			setup: func(t *testing.T, dir string) string {
				g := newGitSyncRoot(t, dir)
				g.sync(t, sha1, basePolicies)
				g.sync(t, sha2, basePolicies)
				return g.link
			},
			want: sha2,
		},
		"a SHA-256 repository's worktree": {
			setup: func(t *testing.T, dir string) string {
				g := newGitSyncRoot(t, dir)
				g.sync(t, sha256, basePolicies)
				return g.link
			},
			want: sha256,
		},
		"a directory under .worktrees not named by a hash is no commit": {
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, ".worktrees", "main")
				writeFiles(t, p, basePolicies)
				return p
			},
			want: "",
		},
		"a link that points nowhere has no commit": {
			setup: func(t *testing.T, dir string) string {
				link := filepath.Join(dir, "current")
				if err := os.Symlink(filepath.Join(".worktrees", sha1), link); err != nil {
					t.Fatal(err)
				}
				return link
			},
			want: "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := WorktreeCommit(tc.setup(t, t.TempDir())); got != tc.want {
				t.Fatalf("WorktreeCommit = %q, want %q", got, tc.want)
			}
		})
	}
}
