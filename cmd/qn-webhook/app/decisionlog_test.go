package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDecisionLogToAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	log, closeLog, err := openDecisionLog(path)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("admission decision", "uid", "u1")
	closeLog()
	log, closeLog, _ = openDecisionLog(path)
	log.Info("admission decision", "uid", "u2")
	closeLog()
	data, _ := os.ReadFile(path)
	if lines := strings.Count(string(data), "\n"); lines != 2 || !strings.Contains(string(data), `"uid":"u2"`) {
		t.Fatalf("decision lines are appended to the file, got:\n%s", data)
	}
	if _, _, err := openDecisionLog(filepath.Join(t.TempDir(), "missing", "dir", "x.jsonl")); err == nil || !strings.Contains(err.Error(), "--decision-log") {
		t.Fatalf("an unwritable destination is an error naming the flag, got %v", err)
	}
}
