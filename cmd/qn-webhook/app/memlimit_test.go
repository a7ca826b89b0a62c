package app

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemoryLimitFromCgroup(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		want    int64
	}{
		"a limit in bytes":       {content: "268435456\n", want: 268435456},
		"no limit":               {content: "max\n", want: 0},
		"something else":         {content: "lots\n", want: 0},
		"a file that is missing": {want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "memory.max")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := memoryLimitFrom(path); got != tc.want {
				t.Fatalf("memoryLimitFrom(%q) = %d, want %d", tc.content, got, tc.want)
			}
		})
	}
}
