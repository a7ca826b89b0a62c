package policies

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
)

const dirFSRego = "package p\ndeny contains \"no\" if input.context.labels.deny == \"yes\"\n"

// TestPolicyDirectoryReadsOnlyRegularFilesWithinBounds: what a load may
// read of a directory, and the error (naming the file) for what it may
// not.
func TestPolicyDirectoryReadsOnlyRegularFilesWithinBounds(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.rego")
	if err := os.WriteFile(outside, []byte(dirFSRego), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		add     func(t *testing.T, dir string)
		opts    LoadOptions
		wantErr string // empty: the set loads
	}{
		"a ConfigMap's layout: every file a symlink through ..data": {
			add: func(t *testing.T, dir string) {
				mustDo(t, os.Mkdir(filepath.Join(dir, "..2026_11_27"), 0o755))
				mustDo(t, os.WriteFile(filepath.Join(dir, "..2026_11_27", "extra.rego"), []byte("package extra\n"), 0o644))
				mustDo(t, os.Symlink("..2026_11_27", filepath.Join(dir, "..data")))
				mustDo(t, os.Symlink("..data/extra.rego", filepath.Join(dir, "extra.rego")))
			},
		},
		"a symlink to a file outside": {
			add:     func(t *testing.T, dir string) { mustDo(t, os.Symlink(outside, filepath.Join(dir, "zz.rego"))) },
			wantErr: "zz.rego: is a symlink that leads outside the policy directory",
		},
		"a symlink to /dev/zero": {
			add:     func(t *testing.T, dir string) { mustDo(t, os.Symlink("/dev/zero", filepath.Join(dir, "data.json"))) },
			wantErr: "data.json: is a symlink that leads outside the policy directory",
		},
		"a FIFO": {
			add: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "zz.rego"), 0o644); err != nil {
					t.Skipf("mkfifo: %v", err)
				}
			},
			wantErr: "zz.rego: is a named pipe (FIFO), not a regular file",
		},
		"a file over the file bound": {
			add: func(t *testing.T, dir string) {
				mustWrite(t, filepath.Join(dir, "big.rego"), "package big\n"+strings.Repeat("#\n", 600))
			},
			opts:    LoadOptions{MaxFileBytes: 1000, MaxSetBytes: 100000},
			wantErr: "big.rego: is 1212 bytes, over the limit of 1000 bytes for one policy file",
		},
		"files over the set bound": {
			add: func(t *testing.T, dir string) {
				mustWrite(t, filepath.Join(dir, "a.rego"), "package a\n"+strings.Repeat("#\n", 400))
				mustWrite(t, filepath.Join(dir, "b.rego"), "package b\n"+strings.Repeat("#\n", 400))
			},
			opts:    LoadOptions{MaxFileBytes: 1000, MaxSetBytes: 1200},
			wantErr: "takes the policy set past its limit of 1200 bytes in all",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"roles.yaml": reloadRoles, "p.rego": dirFSRego})
			tc.add(t, dir)
			done := make(chan error, 1)
			go func() {
				_, err := LoadDir(context.Background(), dir, tc.opts)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the load did not return")
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want the set loaded, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error with %q, got %v", tc.wantErr, err)
			}
		})
	}
}

// TestPolicyDirectoryIsAnFS holds the bounded reader to io/fs's contract
// on an ordinary directory.
func TestPolicyDirectoryIsAnFS(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"roles.yaml": reloadRoles, "p.rego": dirFSRego})
	mustDo(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	mustWrite(t, filepath.Join(dir, "sub", "q.rego"), "package q\n")
	if err := fstest.TestFS(newDirFS(dir, LoadOptions{}), "roles.yaml", "p.rego", "sub/q.rego"); err != nil {
		t.Fatal(err)
	}
}

// TestARelativePolicyDirectoryReads: qnctl lint . names the directory
// relative to the working directory; its files are inside it.
func TestARelativePolicyDirectoryReads(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"roles.yaml": reloadRoles, "p.rego": dirFSRego})
	t.Chdir(dir)
	if err := fstest.TestFS(newDirFS(".", LoadOptions{}), "roles.yaml", "p.rego"); err != nil {
		t.Fatal(err)
	}
}

// TestAFileGrowingPastItsBoundWhileReadIsRefused: the size is checked at
// open and again as the bytes come.
func TestAFileGrowingPastItsBoundWhileReadIsRefused(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "a.rego"), "package a\n")
	d := newDirFS(dir, LoadOptions{MaxFileBytes: 100, MaxSetBytes: 1000})
	f, err := d.Open("a.rego")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mustWrite(t, filepath.Join(dir, "a.rego"), strings.Repeat("#", 500))
	buf := make([]byte, 1000)
	var readErr error
	for total := 0; readErr == nil && total < 1000; {
		var n int
		n, readErr = f.Read(buf)
		total += n
	}
	var pe *fs.PathError
	if !errors.As(readErr, &pe) || pe.Path != "a.rego" || !strings.Contains(readErr.Error(), "over the limit of 100 bytes") {
		t.Fatalf("want an error naming a.rego and its bound, got %v", readErr)
	}
}

// TestAReloadThatDoesNotFinishIsReported: strict health counts a reload
// under way as failing from its start, and the readiness detail says so
// once it has run for stuckReload.
func TestAReloadThatDoesNotFinishIsReported(t *testing.T) {
	r := &reloader{dir: "policies"}
	if s := r.ReloadState(); !s.FailingSince.IsZero() {
		t.Fatalf("no reload under way, yet failing since %s", s.FailingSince)
	}
	began := time.Now().Add(-time.Hour)
	r.reloadingSince = began
	if s := r.ReloadState(); !s.FailingSince.Equal(began) || s.Err == nil || !strings.Contains(s.Err.Error(), "has not finished") {
		t.Fatalf("a reload running for an hour: %+v", s)
	}
	if st := r.Status(); !strings.Contains(st, "WARNING: a reload of policies started 1h0m0s ago") {
		t.Fatalf("Status = %q", st)
	}
	r.reloadingSince = time.Now()
	if st := r.Status(); strings.Contains(st, "WARNING") {
		t.Fatalf("a reload that just began is no warning: %q", st)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	mustDo(t, os.WriteFile(path, []byte(content), 0o644))
}
