//go:build linux || darwin

package dirwatch

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A FIFO left in the directory must not block the fingerprint: only regular
// files are read. Its arrival is a change, so the load that follows can
// refuse it and say so.
func TestFingerprintNotesSpecialFilesWithoutOpeningThem(t *testing.T) {
	dir := plainDir(t, t.TempDir())
	want := mustFingerprint(t, dir)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.rego"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan string, 1)
	go func() { done <- mustFingerprint(t, dir) }()
	select {
	case got := <-done:
		if got == want {
			t.Fatalf("Fingerprint with a FIFO = %s, the same as without it", got)
		}
	case <-time.After(deadline):
		t.Fatal("Fingerprint blocked on a FIFO")
	}
}
