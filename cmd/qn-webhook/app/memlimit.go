package app

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryMax is where cgroup v2 publishes the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// boundedGCPercent is the GOGC qn-webhook runs with when a memory limit
// bounds the heap: a request allocates 1,000–2,000 short-lived objects, and
// collecting a 5× rather than a 2× heap costs about a fifth less CPU per
// request (docs/benchmarks.md); the soft limit makes the collector work
// harder before the heap nears the container's limit.
const boundedGCPercent = 400

// GCSettings are the garbage collector settings tuneGC chose.
type GCSettings struct {
	// MemoryLimit is the Go soft memory limit in bytes; 0 when none.
	MemoryLimit int64
	// GCPercent is GOGC; 0 when left to the runtime (GOGC unset: 100).
	GCPercent int
}

// tuneGC sets the Go runtime's memory limit and GOGC for a server process:
// a soft limit of three quarters of the container's (cgroup v2) unless
// GOMEMLIMIT is set, and, when a limit bounds the heap and GOGC is not set,
// GOGC=400. Without a limit the runtime's defaults stay: nothing would
// bound a larger GOGC's heap. Near the limit the collector runs harder
// instead of letting garbage from large reviews push the process into the
// OOM killer (8 concurrent 6 MiB reviews: 218 MiB peak without, 122 MiB
// with a 100 MiB limit).
func tuneGC(logger *slog.Logger) GCSettings {
	s := gcSettings(os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"), debug.SetMemoryLimit(-1), memoryLimitFrom(cgroupMemoryMax))
	if s.MemoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(s.MemoryLimit)
	}
	if s.GCPercent > 0 {
		debug.SetGCPercent(s.GCPercent)
	}
	if s.MemoryLimit > 0 {
		logger.Info("Go garbage collector tuned to the memory limit", "goMemLimitBytes", s.MemoryLimit, "gogc", s.GCPercent)
	}
	return s
}

// gcSettings decides tuneGC's settings from the GOGC and GOMEMLIMIT
// variables, the limit the runtime runs with now (math.MaxInt64 when none)
// and the container's limit (0 when none).
func gcSettings(gogc, gomemlimit string, runtimeLimit, containerLimit int64) GCSettings {
	var s GCSettings
	switch {
	case gomemlimit != "":
		s.MemoryLimit = runtimeLimit
	case containerLimit > 0:
		s.MemoryLimit = containerLimit / 4 * 3
	}
	if s.MemoryLimit <= 0 || s.MemoryLimit == 1<<63-1 {
		return GCSettings{}
	}
	if gogc == "" {
		s.GCPercent = boundedGCPercent
	}
	return s
}

// memoryLimitFrom reads a cgroup v2 memory.max file: bytes, or 0 for
// "max" (no limit) and anything unreadable.
func memoryLimitFrom(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
