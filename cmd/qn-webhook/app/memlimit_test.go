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

func TestGCSettings(t *testing.T) {
	const none = 1<<63 - 1
	for name, tc := range map[string]struct {
		gogc, gomemlimit string
		runtimeLimit     int64
		container        int64
		want             GCSettings
	}{
		"a container limit: three quarters of it, and GOGC 400": {container: 256 << 20, runtimeLimit: none, want: GCSettings{MemoryLimit: 192 << 20, GCPercent: 400}},
		"GOMEMLIMIT set: its limit, and GOGC 400":               {gomemlimit: "100MiB", runtimeLimit: 100 << 20, container: 256 << 20, want: GCSettings{MemoryLimit: 100 << 20, GCPercent: 400}},
		"GOGC set by the operator is kept":                      {gogc: "150", container: 256 << 20, runtimeLimit: none, want: GCSettings{MemoryLimit: 192 << 20}},
		"no limit anywhere: the runtime's defaults":             {runtimeLimit: none},
		"GOMEMLIMIT=off: no limit, so no larger GOGC":           {gomemlimit: "off", runtimeLimit: none, container: 256 << 20},
	} {
		t.Run(name, func(t *testing.T) {
			if got := gcSettings(tc.gogc, tc.gomemlimit, tc.runtimeLimit, tc.container); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
