// Package version is what every qn-admission binary says about its own
// build: the release version, the commit and the commit's date. The
// Makefile stamps them in at link time (-ldflags -X, see LDFLAGS there), so
// a released image and a rebuild from the same tag print the same thing; a
// plain `go build` falls back to what the Go toolchain recorded.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at link time by the Makefile:
//
//	-X github.com/quantumnode/qn-admission/internal/version.version=0.1.0
//	-X github.com/quantumnode/qn-admission/internal/version.commit=<full commit id>
//	-X github.com/quantumnode/qn-admission/internal/version.date=<commit time, RFC 3339>
//
// The date is the commit's, not the build's: a build from the same commit
// is byte for byte the same binary.
var (
	version string
	commit  string
	date    string
)

// Info describes a build.
type Info struct {
	// Version is the release version ("0.1.0"), the module version Go
	// recorded, or "unknown".
	Version string `json:"version"`
	// Commit is the full commit id the binary was built from, if known.
	Commit string `json:"commit,omitempty"`
	// Date is the commit's time (RFC 3339), if known.
	Date string `json:"date,omitempty"`
	// Modified reports a build from a working tree with uncommitted
	// changes, as far as the Go toolchain could tell.
	Modified bool `json:"modified,omitempty"`
	// Go is the Go release that built the binary.
	Go string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the stamped build information, filling what the Makefile did
// not stamp from the Go toolchain's build info (module version, VCS
// revision and time when -buildvcs recorded them).
func Get() Info {
	return resolve(version, commit, date, readBuildInfo)
}

func readBuildInfo() (*debug.BuildInfo, bool) { return debug.ReadBuildInfo() }

func resolve(version, commit, date string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: version, Commit: commit, Date: date, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := read(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.time":
				if info.Date == "" {
					info.Date = s.Value
				}
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "unknown"
	}
	return info
}

// String is the version line of program, e.g.
//
//	qn-webhook 0.1.0 (commit 1f6bae9…, 2026-11-25T18:29:00Z) go1.26.8 linux/arm64
func (i Info) String(program string) string {
	line := program + " " + i.Version
	if i.Commit != "" || i.Date != "" {
		line += " ("
		if i.Commit != "" {
			line += "commit " + i.Commit
			if i.Modified {
				line += ", modified"
			}
			if i.Date != "" {
				line += ", "
			}
		}
		line += i.Date + ")"
	}
	return fmt.Sprintf("%s %s %s", line, i.Go, i.Platform)
}
