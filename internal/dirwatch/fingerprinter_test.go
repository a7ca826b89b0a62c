package dirwatch

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// policiesOnly includes what a policy set loads, as policies.IsPolicyFile
// does (which this package cannot import).
func policiesOnly(rel string) bool {
	return rel == "roles.yaml" || rel == "data.json" || strings.HasSuffix(rel, ".rego")
}

// trusting is a Fingerprinter that trusts a listing at once, as it does
// two seconds after a directory's last change.
func trusting(include Include) *Fingerprinter {
	f := NewFingerprinter(include)
	f.now = func() time.Time { return time.Now().Add(time.Hour) }
	return f
}

func TestFingerprintOfLeavesOutWhatIsNotIncluded(t *testing.T) {
	dir := plainDir(t, t.TempDir())
	want, err := FingerprintOf(dir, policiesOnly)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"README.md": "docs", "lib/notes.txt": "notes"})
	// A FIFO nobody reads is not even looked at.
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, fp := range map[string]func() (string, error){
		"FingerprintOf":            func() (string, error) { return FingerprintOf(dir, policiesOnly) },
		"a Fingerprinter":          func() (string, error) { return NewFingerprinter(policiesOnly).Fingerprint(dir) },
		"a trusting Fingerprinter": func() (string, error) { return trusting(policiesOnly).Fingerprint(dir) },
	} {
		got, err := fp()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: files that are not included changed the fingerprint", name)
		}
	}
	if all := mustFingerprint(t, dir); all == want {
		t.Errorf("Fingerprint (every file) did not see the files added")
	}
}

// TestAFingerprinterSeesEveryChange: with every listing remembered (as two
// seconds after a directory's last change), an included file added,
// removed, renamed or rewritten in place, at the top or below, is still a
// new fingerprint; a file that is not included is not.
func TestAFingerprinterSeesEveryChange(t *testing.T) {
	changes := map[string]struct {
		change func(t *testing.T, dir string)
		same   bool
	}{
		"a .rego file added at the top": {change: func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"new.rego": "package new\n"})
		}},
		"a .rego file added below": {change: func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"lib/new.rego": "package new\n"})
		}},
		"a file rewritten in place": {change: func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"common.rego": "package common\n# changed\n"})
		}},
		"a file removed": {change: func(t *testing.T, dir string) {
			mustRemove(t, filepath.Join(dir, "data.json"))
		}},
		"a file renamed": {change: func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "common.rego"), filepath.Join(dir, "common2.rego")); err != nil {
				t.Fatal(err)
			}
		}},
		"a directory replaced by another of the same name": {change: func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "lib")); err != nil {
				t.Fatal(err)
			}
			writeFiles(t, dir, map[string]string{"lib/other.rego": "package other\n"})
		}},
		"a file that is not included added": {same: true, change: func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{"README.md": "docs", "lib/x.txt": "x"})
		}},
	}
	for name, tc := range changes {
		t.Run(name, func(t *testing.T) {
			dir := plainDir(t, t.TempDir())
			f := trusting(policiesOnly)
			before, err := f.Fingerprint(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.listings) == 0 {
				t.Fatal("no listing remembered")
			}
			tc.change(t, dir)
			after, err := f.Fingerprint(dir)
			if err != nil {
				t.Fatal(err)
			}
			if (after == before) != tc.same {
				t.Fatalf("fingerprint before %s, after %s; want them the same: %v", before, after, tc.same)
			}
			if fresh, _ := FingerprintOf(dir, policiesOnly); fresh != after {
				t.Fatalf("the Fingerprinter says %s where a fresh look says %s", after, fresh)
			}
		})
	}
}

// TestAFreshListingIsNotRemembered: a directory that changed within the
// last two seconds is listed again at the next look, since a file system
// with a coarse clock could change it again within the same tick.
func TestAFreshListingIsNotRemembered(t *testing.T) {
	dir := plainDir(t, t.TempDir())
	f := NewFingerprinter(policiesOnly)
	if _, err := f.Fingerprint(dir); err != nil {
		t.Fatal(err)
	}
	if len(f.listings) != 0 {
		t.Fatalf("listings of a directory written just now were remembered: %v", f.listings)
	}
}

// TestAFingerprinterForgetsDirectoriesItNoLongerMeets: a git-sync checkout
// moves to a new worktree at every commit; the old ones' listings go.
func TestAFingerprinterForgetsDirectoriesItNoLongerMeets(t *testing.T) {
	g := newGitSyncRoot(t, t.TempDir())
	f := trusting(policiesOnly)
	for _, hash := range []string{sha1, strings.Repeat("b", 40), strings.Repeat("c", 40)} {
		g.sync(t, hash, flat(basePolicies))
		if _, err := f.Fingerprint(g.link); err != nil {
			t.Fatal(err)
		}
		for k := range f.listings {
			if !strings.Contains(k.abs, hash) {
				t.Fatalf("after the sync to %s, a listing of %s is still remembered", hash, k.abs)
			}
		}
	}
}

func mustRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}
