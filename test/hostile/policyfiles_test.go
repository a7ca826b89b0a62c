package hostile

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// policyFileCap is the RSS past which a policy-directory case kills
// qn-webhook and fails: far above what a refused set costs (about 50 MiB),
// far below what reading /dev/zero reaches (2 GiB in 3 s before).
const policyFileCap = 384 << 20

// notFiles are the entries of a policy directory that are not policy
// files, each as the issue found it (round three, items 3 and 4): what to
// put in the directory, and what the refusal must say besides the name.
func notFiles(t *testing.T, outside string) map[string]struct {
	name string
	make func(path string) error
	want string
} {
	return map[string]struct {
		name string
		make func(path string) error
		want string
	}{
		"zz.rego a symlink to /dev/zero": {
			name: "zz.rego", make: func(p string) error { return os.Symlink("/dev/zero", p) },
			want: "outside the policy directory; a policy directory's symlinks must stay inside it (/dev/zero)",
		},
		"data.json a symlink to /dev/urandom": {
			name: "data.json", make: func(p string) error { return os.Symlink("/dev/urandom", p) },
			want: "(/dev/urandom)",
		},
		"a sparse 1 GiB data.json": {
			name: "data.json", make: func(p string) error {
				f, err := os.Create(p)
				if err != nil {
					return err
				}
				return errors.Join(f.Truncate(1<<30), f.Close())
			},
			want: "over the limit of 1048576 bytes for one policy file",
		},
		"a FIFO named zz.rego": {
			name: "zz.rego", make: func(p string) error { return syscall.Mkfifo(p, 0o644) },
			want: "named pipe",
		},
		"zz.rego a symlink to a file outside the directory": {
			name: "zz.rego", make: func(p string) error { return os.Symlink(outside, p) },
			want: "outside the policy directory",
		},
	}
}

// TestPolicyFilesThatAreNotFilesAreRefusedOnReload: each entry that is
// not a policy file, pushed to the directory of a running server, makes
// the reload fail with a message naming it, at once, with memory
// untouched; the last good set keeps judging and the replica stays ready.
// Before, /dev/zero, /dev/urandom and the sparse file were read to the
// end (2 GiB in 3 s), and a FIFO stopped reloads for good.
func TestPolicyFilesThatAreNotFilesAreRefusedOnReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyBundle(t, dir)
	outside := filepath.Join(t.TempDir(), "outside.rego")
	writeFile(t, outside, "package outside\n")
	s := start(t, "--policy-dir", dir, "--policy-poll-interval", "100ms")
	stopWatch := s.killAbove(policyFileCap)
	defer stopWatch()
	for name, tc := range notFiles(t, outside) {
		t.Run(name, func(t *testing.T) {
			s.t = t
			path := filepath.Join(dir, tc.name)
			if err := tc.make(path); err != nil {
				t.Skipf("cannot make %s here: %v", tc.name, err)
			}
			defer func() {
				s.t = t
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				s.waitFor("the restored directory clears the failure", func() bool { return s.metric("qn_admission_policy_reload_failing") == 0 })
			}()
			began := time.Now()
			s.waitFor("the refusal shows in readiness", func() bool {
				_, body := s.probe("/readyz?verbose")
				return strings.Contains(body, tc.name) && strings.Contains(body, tc.want)
			})
			took := time.Since(began)
			code, body := s.probe("/readyz?verbose")
			if code != 200 || !strings.Contains(body, "failed and was not applied") {
				t.Fatalf("want ready, saying the change was not applied: HTTP %d\n%s", code, body)
			}
			if v := s.metric("qn_admission_policy_reload_failing"); v != 1 {
				t.Fatalf("qn_admission_policy_reload_failing = %v, want 1", v)
			}
			s.normalStillWorks()
			st := s.memoryUnder(policyFileCap)
			t.Logf("refused within %s of the push (poll 100ms); RSS %.1f MiB, peak so far %.1f MiB; %s", took.Round(time.Millisecond), mib(st.RSS), mib(st.HWM), detailLine(body, "policies"))
		})
	}
	// SIGTERM still stops the process within its grace (before, a reload
	// blocked on a FIFO kept it running).
	path := filepath.Join(dir, "zz.rego")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	s.t = t
	s.waitFor("the FIFO is refused", func() bool {
		_, body := s.probe("/readyz?verbose")
		return strings.Contains(body, "named pipe")
	})
	began := time.Now()
	if err := s.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.proc.Exited():
		t.Logf("stopped %s after SIGTERM", time.Since(began).Round(time.Millisecond))
	case <-time.After(25 * time.Second): // the grace is 20s
		t.Fatalf("qn-webhook did not stop within 25s of SIGTERM with a FIFO in its policy directory")
	}
}

// TestPolicyFilesThatAreNotFilesStopTheStart: the same entries in the
// directory a server starts with make it exit with an error naming the
// file, at once, instead of reading until the OOM killer comes (a FIFO:
// instead of never starting).
func TestPolicyFilesThatAreNotFilesStopTheStart(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.rego")
	writeFile(t, outside, "package outside\n")
	for name, tc := range notFiles(t, outside) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "policies")
			copyBundle(t, dir)
			if err := tc.make(filepath.Join(dir, tc.name)); err != nil {
				t.Skipf("cannot make %s here: %v", tc.name, err)
			}
			out, code, peak, took := runToExit(t, 30*time.Second, policyFileCap,
				"--tls-self-signed", "--tls-self-signed-dir", t.TempDir(),
				"--listen-address", "127.0.0.1:0", "--probe-address", "127.0.0.1:0",
				"--policy-dir", dir)
			if code == 0 || !strings.Contains(out, tc.name) || !strings.Contains(out, tc.want) {
				t.Fatalf("want an exit naming %s (%q), got code %d after %s:\n%s", tc.name, tc.want, code, took, tail(out, 2000))
			}
			t.Logf("exited %d after %s, peak RSS %.1f MiB: %s", code, took.Round(time.Millisecond), mib(peak), lastLine(out))
		})
	}
}

// TestThePolicySetIsBoundedInAll: files each under the per-file bound but
// over the set's bound together refuse the set, naming the file that
// crossed it.
func TestThePolicySetIsBoundedInAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyBundle(t, dir)
	s := start(t, "--policy-dir", dir, "--policy-poll-interval", "100ms",
		"--max-policy-file-bytes", "1048576", "--max-policy-set-bytes", "2097152")
	comment := "# " + strings.Repeat("x", 1000) + "\n"
	for _, name := range []string{"pad1.rego", "pad2.rego", "pad3.rego"} {
		writeFile(t, filepath.Join(dir, name), "package "+strings.TrimSuffix(name, ".rego")+"\n"+strings.Repeat(comment, 900))
	}
	s.waitFor("the set's bound shows in readiness", func() bool {
		_, body := s.probe("/readyz?verbose")
		return strings.Contains(body, "pad") && strings.Contains(body, "--max-policy-set-bytes")
	})
	s.normalStillWorks()
}

// killAbove kills qn-webhook when its RSS passes limit (failing the test),
// so a case that reads without bound fails instead of taking the machine's
// memory; stop ends the watch.
func (s *server) killAbove(limit uint64) (stop func()) {
	var done atomic.Bool
	finished := make(chan struct{})
	t := s.t
	go func() {
		defer close(finished)
		for !done.Load() {
			st, err := harness.ReadProc(s.proc.PID())
			if err != nil {
				return
			}
			if st.RSS > limit {
				_ = s.proc.Signal(syscall.SIGKILL)
				t.Errorf("qn-webhook reached %.0f MiB RSS; killed", mib(st.RSS))
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() {
		done.Store(true)
		<-finished
	}
}

// runToExit runs qn-webhook with args until it exits, killing it past
// timeout or above rssCap; it returns its output, exit code, peak RSS and
// how long it ran.
func runToExit(t *testing.T, timeout time.Duration, rssCap uint64, args ...string) (string, int, uint64, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out harness.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		for {
			select {
			case <-exited:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if st, err := harness.ReadProc(cmd.Process.Pid); err == nil && st.RSS > rssCap {
				_ = cmd.Process.Kill()
				t.Errorf("qn-webhook reached %.0f MiB RSS while starting; killed", mib(st.RSS))
				return
			}
		}
	}()
	// A server that started serving despite the entry is stopped.
	go func() {
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if strings.Contains(out.String(), harness.ServingMessage) {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				return
			}
		}
	}()
	_ = cmd.Wait()
	took := time.Since(began)
	close(exited)
	var peak uint64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		peak = uint64(ru.Maxrss) << 10
	}
	return out.String(), cmd.ProcessState.ExitCode(), peak, took
}

// detailLine is the line of a verbose probe page about check.
func detailLine(page, check string) string {
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, "]"+check+" ") {
			return l
		}
	}
	return ""
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
