package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings}, true
		}
	}
	goVCS := vcs(
		debug.BuildSetting{Key: "vcs.revision", Value: "aaaa"},
		debug.BuildSetting{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		debug.BuildSetting{Key: "vcs.modified", Value: "true"},
	)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	tests := map[string]struct {
		version, commit, date string
		read                  func() (*debug.BuildInfo, bool)
		want                  Info
		line                  string
	}{
		"the Makefile's stamps win over what Go recorded": {
			version: "0.1.0", commit: "bbbb", date: "2026-11-25T18:29:00Z", read: goVCS,
			want: Info{Version: "0.1.0", Commit: "bbbb", Date: "2026-11-25T18:29:00Z", Modified: true},
			line: "qnctl 0.1.0 (commit bbbb, modified, 2026-11-25T18:29:00Z) " + runtime.Version() + " " + platform,
		},
		"a plain go build shows the VCS stamp Go recorded": {
			read: goVCS,
			want: Info{Version: "unknown", Commit: "aaaa", Date: "2026-01-02T03:04:05Z", Modified: true},
			line: "qnctl unknown (commit aaaa, modified, 2026-01-02T03:04:05Z) " + runtime.Version() + " " + platform,
		},
		"go install of a tagged module shows its version": {
			read: func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, true },
			want: Info{Version: "v0.2.0"},
			line: "qnctl v0.2.0 " + runtime.Version() + " " + platform,
		},
		"no build info at all": {
			read: func() (*debug.BuildInfo, bool) { return nil, false },
			want: Info{Version: "unknown"},
			line: "qnctl unknown " + runtime.Version() + " " + platform,
		},
		"a date without a commit": {
			version: "0.1.0", date: "2026-11-25T18:29:00Z", read: vcs(),
			want: Info{Version: "0.1.0", Date: "2026-11-25T18:29:00Z"},
			line: "qnctl 0.1.0 (2026-11-25T18:29:00Z) " + runtime.Version() + " " + platform,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := resolve(tc.version, tc.commit, tc.date, tc.read)
			tc.want.Go, tc.want.Platform = runtime.Version(), platform
			if got != tc.want {
				t.Errorf("resolve = %+v, want %+v", got, tc.want)
			}
			if line := got.String("qnctl"); line != tc.line {
				t.Errorf("String = %q, want %q", line, tc.line)
			}
		})
	}
}
