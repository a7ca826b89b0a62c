package harness

import (
	"os"
	"testing"
)

func TestReadProcSeesThisProcessMemory(t *testing.T) {
	s, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS == 0 || s.HWM < s.RSS || s.RSSAnon == 0 {
		t.Fatalf("RSS %d HWM %d anon %d: want a resident set and a peak at least as large", s.RSS, s.HWM, s.RSSAnon)
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
	if MemoryTotal() == 0 {
		t.Error("no MemTotal in /proc/meminfo")
	}
}
