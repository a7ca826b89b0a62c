package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDecisionLogToAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	log, _, closeLog, err := openDecisionLog(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("admission decision", "uid", "u1")
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), `"uid":"u1"`) {
		t.Fatalf("with no flush interval a line is written at once, got %q", data)
	}
	if err := closeLog(); err != nil {
		t.Fatal(err)
	}
	// Grouped: nothing reaches the file until the interval passes or
	// the log is closed, which writes everything pending.
	log, _, closeLog, _ = openDecisionLog(path, time.Hour)
	log.Info("admission decision", "uid", "u2")
	log.Info("admission decision", "uid", "u3")
	if data, _ := os.ReadFile(path); strings.Contains(string(data), `"uid":"u2"`) {
		t.Fatalf("a line was written before the flush interval passed: %q", data)
	}
	if err := closeLog(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if lines := strings.Count(string(data), "\n"); lines != 3 || !strings.Contains(string(data), `"uid":"u3"`) {
		t.Fatalf("decision lines are appended to the file, and closing writes what is pending; got:\n%s", data)
	}
	if _, _, _, err := openDecisionLog(filepath.Join(t.TempDir(), "missing", "dir", "x.jsonl"), 0); err == nil || !strings.Contains(err.Error(), "--decision-log") {
		t.Fatalf("an unwritable destination is an error naming the flag, got %v", err)
	}
}
