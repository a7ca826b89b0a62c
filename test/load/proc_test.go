package load

import (
	"os"
	"testing"
	"time"
)

func TestReadProcSeesThisProcessWorkAndMemory(t *testing.T) {
	before, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSS == 0 || before.HWM < before.RSS {
		t.Fatalf("RSS %d HWM %d: want a resident set and a peak at least as large", before.RSS, before.HWM)
	}
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
		now, err := ReadProc(os.Getpid())
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

func TestReadProcOfAMissingProcessFails(t *testing.T) {
	if _, err := ReadProc(1 << 30); err == nil {
		t.Fatal("no error for a pid that cannot exist")
	}
}

func TestMachineCPUIsBusyPartOfTotal(t *testing.T) {
	m, err := ReadMachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	if m.Total <= 0 || m.Busy < 0 || m.Busy > m.Total {
		t.Fatalf("busy %s of total %s", m.Busy, m.Total)
	}
	if numCPU() < 1 {
		t.Fatal("no CPUs")
	}
}
