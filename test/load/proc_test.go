package load

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

func TestSamplerSeesThisProcessWorkAndMemory(t *testing.T) {
	s, err := StartSampler(os.Getpid(), time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until /proc shows it (clock ticks are 10 ms).
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x += i
		}
		now, err := harness.ReadProc(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now.CPU-s.start.CPU >= 50*time.Millisecond {
			break
		}
	}
	_ = x
	usage, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if usage.CPU < 50*time.Millisecond {
		t.Errorf("the sampler saw %s of CPU while this test burnt at least 50ms", usage.CPU)
	}
	if usage.MaxRSS == 0 {
		t.Error("the sampler saw no RSS")
	}
}

// A helper's CPU (a redis-server behind the target) counts in the
// target's: here a shell that burns CPU beside an idle sleep.
func TestSamplerCountsTheHelpersCPU(t *testing.T) {
	idle := exec.Command("sleep", "30")
	busy := exec.Command("sh", "-c", "while :; do :; done")
	for _, c := range []*exec.Cmd{idle, busy} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	s, err := StartSampler(idle.Process.Pid, 10*time.Millisecond, busy.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if now, err := harness.ReadProc(busy.Process.Pid); err == nil && now.CPU-s.helpersStart >= 50*time.Millisecond {
			break
		}
	}
	usage, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if usage.HelperCPU < 50*time.Millisecond || usage.CPU < usage.HelperCPU {
		t.Errorf("CPU %s, the helper's part %s: want the busy helper's 50ms or more counted in it", usage.CPU, usage.HelperCPU)
	}
}
