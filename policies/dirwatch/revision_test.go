package dirwatch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	sha1 = "1111111111111111111111111111111111111111"
	sha2 = "2222222222222222222222222222222222222222"
	sha3 = "3333333333333333333333333333333333333333"
)

func TestRevision(t *testing.T) {
	cases := map[string]struct {
		setup func(t *testing.T, dir string) string // returns the path to ask about
		want  string
	}{
		"a plain directory has no revision": {
			setup: plainDir,
			want:  "",
		},
		"a branch resolved through a loose ref": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{
					".git/HEAD":            "ref: refs/heads/main\n",
					".git/refs/heads/main": sha1 + "\n",
				})
				return dir
			},
			want: sha1,
		},
		"a branch only in packed-refs, after git gc": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{
					".git/HEAD": "ref: refs/heads/main\n",
					".git/packed-refs": "# pack-refs with: peeled fully-peeled sorted \n" +
						sha3 + " refs/heads/feature\n" +
						sha2 + " refs/heads/main\n" +
						sha3 + " refs/tags/v1\n" +
						"^" + sha1 + "\n",
				})
				return dir
			},
			want: sha2,
		},
		"a loose ref wins over a stale packed one": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{
					".git/HEAD":            "ref: refs/heads/main\n",
					".git/refs/heads/main": sha2 + "\n",
					".git/packed-refs":     sha1 + " refs/heads/main\n",
				})
				return dir
			},
			want: sha2,
		},
		"a detached HEAD": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{".git/HEAD": sha3 + "\n"})
				return dir
			},
			want: sha3,
		},
		"a SHA-256 repository": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{".git/HEAD": strings.Repeat("ab", 32) + "\n"})
				return dir
			},
			want: strings.Repeat("ab", 32),
		},
		"a worktree whose .git file names an absolute gitdir": {
			setup: func(t *testing.T, dir string) string {
				gitDir := filepath.Join(dir, "repo/.git/worktrees/wt")
				writeFiles(t, dir, map[string]string{
					"repo/.git/worktrees/wt/HEAD":      sha2 + "\n",
					"repo/.git/worktrees/wt/commondir": "../..\n",
					"wt/roles.yaml":                    "roles: {}\n",
					"wt/.git":                          "gitdir: " + gitDir + "\n",
				})
				return filepath.Join(dir, "wt")
			},
			want: sha2,
		},
		"a worktree on a branch kept in the main repository": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{
					"repo/.git/refs/heads/feature":     sha1 + "\n",
					"repo/.git/worktrees/wt/HEAD":      "ref: refs/heads/feature\n",
					"repo/.git/worktrees/wt/commondir": "../..\n",
					"wt/.git":                          "gitdir: ../repo/.git/worktrees/wt\n",
				})
				return filepath.Join(dir, "wt")
			},
			want: sha1,
		},
		"a git-sync link, mounted under another path than git-sync's": {
			setup: func(t *testing.T, dir string) string {
				g := newGitSyncRoot(t, dir)
				g.sync(t, sha1, basePolicies)
				g.sync(t, sha2, basePolicies)
				return g.link
			},
			want: sha2,
		},
		"a .git file whose gitdir is gone": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{".git": "gitdir: /nonexistent/.git/worktrees/x\n"})
				return dir
			},
			want: "",
		},
		"a branch with no commit yet": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{".git/HEAD": "ref: refs/heads/main\n"})
				return dir
			},
			want: "",
		},
		"a HEAD naming a ref outside refs/": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{
					".git/HEAD":   "ref: refs/../../secret\n",
					"secret":      sha1 + "\n",
					".git/secret": sha1 + "\n",
				})
				return dir
			},
			want: "",
		},
		"a HEAD that is neither a hash nor a ref": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{".git/HEAD": "garbage\n"})
				return dir
			},
			want: "",
		},
		"a symbolic ref that points at itself": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{
					".git/HEAD":            "ref: refs/heads/loop\n",
					".git/refs/heads/loop": "ref: refs/heads/loop\n",
				})
				return dir
			},
			want: "",
		},
		"a subdirectory of a checkout": {
			setup: func(t *testing.T, dir string) string {
				writeFiles(t, dir, map[string]string{
					".git/HEAD":           sha1 + "\n",
					"policies/roles.yaml": "roles: {}\n",
				})
				return filepath.Join(dir, "policies")
			},
			want: "",
		},
		"a missing directory": {
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "missing") },
			want:  "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := tc.setup(t, t.TempDir())
			if got := Revision(path); got != tc.want {
				t.Fatalf("Revision = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRevisionAgreesWithGit checks the reading of git's files against git
// itself, on the layouts we meet: a clone on a branch, after gc packs its
// refs, and a detached worktree as git-sync makes.
func TestRevisionAgreesWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = append(os.Environ(),
			"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	writeFiles(t, repo, basePolicies)
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "policies")

	if got, want := Revision(repo), git("rev-parse", "HEAD"); got != want {
		t.Errorf("on a branch: Revision = %q, git says %q", got, want)
	}
	git("gc", "-q")
	if _, err := os.Stat(filepath.Join(repo, ".git/refs/heads/main")); err == nil {
		t.Log("git gc left the loose ref; packed-refs not exercised here")
	}
	if got, want := Revision(repo), git("rev-parse", "HEAD"); got != want {
		t.Errorf("after gc: Revision = %q, git says %q", got, want)
	}
	wt := filepath.Join(dir, "wt")
	git("worktree", "add", "-q", "--detach", wt)
	if got, want := Revision(wt), git("rev-parse", "HEAD"); got != want {
		t.Errorf("in a detached worktree: Revision = %q, git says %q", got, want)
	}
	git("worktree", "add", "-q", "-b", "feature", filepath.Join(dir, "wt2"))
	if got, want := Revision(filepath.Join(dir, "wt2")), git("rev-parse", "feature"); got != want {
		t.Errorf("in a worktree on a branch: Revision = %q, git says %q", got, want)
	}
}
