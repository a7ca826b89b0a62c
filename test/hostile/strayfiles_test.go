package hostile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// strayFiles is how many files that are not policies the case puts in
// the policy directory: a repository's documentation, fixtures or build
// output checked out by git-sync beside the policies (round three, item 6).
const strayFiles = 100_000

// TestFilesThatAreNotPoliciesCostNeitherStartNorIdle: 100,000 files that
// no load reads, in the policy directory beside the bundle, cost neither
// the start nor the idle server: only what loads is hashed and watched.
// Before, every file was hashed at start (three times) and again by the
// sync-lag sample every second: a 10.8 s start and 38 % of a core idle.
//
// Both bounds are on CPU time the process used, not on wall time, so a
// loaded machine stretches the figures without failing them.
func TestFilesThatAreNotPoliciesCostNeitherStartNorIdle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyBundle(t, dir)
	made := time.Now()
	page := strings.Repeat("notes that are not a policy\n", 40)
	if err := os.Mkdir(filepath.Join(dir, "fixtures"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range strayFiles {
		// Names a load never reads, some next to names it does: YAML
		// under fixtures/ is qnctl's cases, never policies.
		name := fmt.Sprintf("doc-%06d.md", i)
		switch i % 4 {
		case 1:
			name = fmt.Sprintf("fixture-%06d.rego.txt", i)
		case 2:
			name = fmt.Sprintf("data-%06d.json", i)
		case 3:
			name = fmt.Sprintf("fixtures/node-%06d.yaml", i)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d files that are not policies in %s", strayFiles, time.Since(made).Round(time.Millisecond))

	began := time.Now()
	s := start(t, "--policy-dir", dir)
	startWall := time.Since(began)
	atServing, err := harness.ReadProc(s.proc.PID())
	if err != nil {
		t.Fatal(err)
	}
	s.normalStillWorks()

	// Idle: the poll (every 10s by default) and the sync-lag sample
	// (every second by default) run; nothing else does. A directory that
	// changed in the last two seconds is listed in full at every look
	// (a file system's clock may tick coarsely), so idle begins after.
	time.Sleep(3 * time.Second)
	const idle = 10 * time.Second
	before, err := harness.ReadProc(s.proc.PID())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(idle)
	after, err := harness.ReadProc(s.proc.PID())
	if err != nil {
		t.Fatal(err)
	}
	idleShare := float64(after.CPU-before.CPU) / float64(idle)
	t.Logf("start: %s wall, %s CPU to serving; idle: %.1f%% of a core over %s; RSS %.1f MiB",
		startWall.Round(time.Millisecond), atServing.CPU, 100*idleShare, idle, mib(after.RSS))
	if atServing.CPU > 3*time.Second {
		t.Errorf("the start took %s of CPU with %d files that are not policies beside the bundle; want under 3s (only what loads is hashed)", atServing.CPU, strayFiles)
	}
	if idleShare > 0.10 {
		t.Errorf("idle, qn-webhook used %.1f%% of a core with %d files that are not policies in its directory; want under 10%%", 100*idleShare, strayFiles)
	}

	// A file that is not a policy changing reloads nothing; a policy
	// file changing still does.
	reloads := s.metricLabelled(`qn_admission_policy_reloads_total{result="success"}`)
	writeFile(t, filepath.Join(dir, "doc-000000.md"), "changed\n")
	time.Sleep(3 * time.Second) // the watch's event, its debounce and a look
	if got := s.metricLabelled(`qn_admission_policy_reloads_total{result="success"}`); got != reloads {
		t.Fatalf("a change to a file that is not a policy reloaded the set (reloads %v, then %v)", reloads, got)
	}
	writeFile(t, filepath.Join(dir, "extra.rego"), "package extra\n\nanswer := 42\n")
	s.waitFor("a new .rego file is loaded", func() bool {
		return s.metricLabelled(`qn_admission_policy_reloads_total{result="success"}`) > reloads
	})
}

// metricLabelled reads one sample from /metrics by its full series name
// (labels included), -1 when absent.
func (s *server) metricLabelled(series string) float64 {
	s.t.Helper()
	code, page := s.probe("/metrics")
	if code != 200 {
		s.t.Fatalf("/metrics: HTTP %d", code)
	}
	for line := range strings.SplitSeq(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}
