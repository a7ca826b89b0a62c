package load

import (
	"os"
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
