package dirwatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFingerprintIsTheSameForTheSameContent(t *testing.T) {
	files := flat(basePolicies)
	deliveries := map[string]func(t *testing.T, dir string) string{
		"a ConfigMap volume (files are symlinks through ..data)": func(t *testing.T, dir string) string {
			newConfigMapVolume(t, dir, files)
			return dir
		},
		"a ConfigMap volume after an update back to the same files": func(t *testing.T, dir string) string {
			v := newConfigMapVolume(t, dir, map[string]string{"roles.yaml": "old"})
			v.update(t, files)
			// kubelet removes the links of keys that left; none did here.
			return dir
		},
		"a git-sync link to a worktree with a .git file": func(t *testing.T, dir string) string {
			g := newGitSyncRoot(t, dir)
			g.sync(t, sha1, files)
			return g.link
		},
		"a symlink to a plain directory": func(t *testing.T, dir string) string {
			writeFiles(t, filepath.Join(dir, "real"), files)
			link := filepath.Join(dir, "link")
			if err := os.Symlink("real", link); err != nil {
				t.Fatal(err)
			}
			return link
		},
		"a checkout with a .git directory and editor leftovers": func(t *testing.T, dir string) string {
			writeFiles(t, dir, files)
			writeFiles(t, dir, map[string]string{
				".git/HEAD":       sha1,
				".roles.yaml.swp": "swap",
				".cache/x":        "y",
			})
			return dir
		},
		"a directory with an extra empty subdirectory": func(t *testing.T, dir string) string {
			writeFiles(t, dir, files)
			if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
				t.Fatal(err)
			}
			return dir
		},
		"a directory with a dangling symlink": func(t *testing.T, dir string) string {
			writeFiles(t, dir, files)
			if err := os.Symlink("nowhere", filepath.Join(dir, "gone.rego")); err != nil {
				t.Fatal(err)
			}
			return dir
		},
	}
	plain := t.TempDir()
	writeFiles(t, plain, files)
	want := mustFingerprint(t, plain)
	if !strings.HasPrefix(want, "sha256:") || len(want) != len("sha256:")+64 {
		t.Fatalf("Fingerprint = %q, want sha256:<64 hex>", want)
	}
	for name, deliver := range deliveries {
		t.Run(name, func(t *testing.T) {
			if got := mustFingerprint(t, deliver(t, t.TempDir())); got != want {
				t.Fatalf("Fingerprint = %s, want %s (the plain directory)", got, want)
			}
		})
	}
}

func TestFingerprintChangesWithContent(t *testing.T) {
	changes := map[string]func(t *testing.T, dir string){
		"a file's content changed": func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"roles.yaml": "roles: {}\n"})
		},
		"a file renamed": func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "common.rego"), filepath.Join(dir, "common2.rego")); err != nil {
				t.Fatal(err)
			}
		},
		"a file moved into a subdirectory": func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "common.rego"), filepath.Join(dir, "lib", "common.rego")); err != nil {
				t.Fatal(err)
			}
		},
		"an empty file added": func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"empty.rego": ""})
		},
		"a file removed": func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "data.json")); err != nil {
				t.Fatal(err)
			}
		},
		"content moved between two files": func(t *testing.T, dir string) {
			// Same bytes overall, different files: must not collide.
			writeFiles(t, dir, map[string]string{
				"common.rego": basePolicies["common.rego"] + basePolicies["data.json"],
				"data.json":   "",
			})
		},
		"a symlinked subdirectory added": func(t *testing.T, dir string) {
			if err := os.Symlink("lib", filepath.Join(dir, "lib2")); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			dir := plainDir(t, t.TempDir())
			before := mustFingerprint(t, dir)
			change(t, dir)
			if after := mustFingerprint(t, dir); after == before {
				t.Fatalf("Fingerprint unchanged (%s)", after)
			}
		})
	}
}

func TestFingerprintStopsAtSymlinkCycles(t *testing.T) {
	dir := plainDir(t, t.TempDir())
	if err := os.Symlink("..", filepath.Join(dir, "lib", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".", filepath.Join(dir, "self")); err != nil {
		t.Fatal(err)
	}
	if _, err := Fingerprint(dir); err != nil {
		t.Fatal(err)
	}
	if targets := watchTargets(dir); len(targets) == 0 {
		t.Fatal("watchTargets returned nothing")
	}
}

func TestFingerprintErrors(t *testing.T) {
	cases := map[string]func(t *testing.T, dir string) string{
		"a missing directory": func(t *testing.T, dir string) string {
			return filepath.Join(dir, "missing")
		},
		"a file, not a directory": func(t *testing.T, dir string) string {
			writeFiles(t, dir, map[string]string{"roles.yaml": "x"})
			return filepath.Join(dir, "roles.yaml")
		},
		"a dangling root symlink (git-sync before its first sync)": func(t *testing.T, dir string) string {
			link := filepath.Join(dir, "current")
			if err := os.Symlink(".worktrees/none", link); err != nil {
				t.Fatal(err)
			}
			return link
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			if fp, err := Fingerprint(setup(t, t.TempDir())); err == nil {
				t.Fatalf("Fingerprint = %s, want an error", fp)
			}
		})
	}
}
