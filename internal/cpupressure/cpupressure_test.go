package cpupressure

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestSomeTotalReadsTheSomeLine(t *testing.T) {
	got, err := SomeTotal([]byte("some avg10=22.65 avg60=36.70 avg300=39.29 total=25001626221\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"))
	if err != nil || got != 25001626221 {
		t.Fatalf("SomeTotal = %d, %v; want 25001626221", got, err)
	}
	for _, bad := range []string{"", "full avg10=0.00 total=3\n", "some avg10=1.00\n", "some avg10=1.00 total=-4\n"} {
		if _, err := SomeTotal([]byte(bad)); err == nil {
			t.Errorf("SomeTotal(%q) took a file without a \"some\" total", bad)
		}
	}
}

// A PSI file whose total moves between reads: quiet while it stands
// still, not while it grows by more than the tolerance of the span.
func TestQuietFollowsTheStallTotal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pressure")
	write := func(total int) {
		if err := os.WriteFile(path, []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total="+itoa(total)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(1000)
	m, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	time.Sleep(3 * m.window)
	if !m.Quiet() {
		t.Fatal("not quiet while the total stood still")
	}
	write(1000 + 1_000_000) // a second of stall
	time.Sleep(3 * m.window)
	if m.Quiet() {
		t.Fatal("quiet after tasks waited longer than the span")
	}
	time.Sleep(3 * m.window)
	if !m.Quiet() {
		t.Fatal("not quiet once the total stood still again")
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * m.window)
	if m.Quiet() {
		t.Fatal("quiet while the file did not parse")
	}
}

// On the machine's own PSI file, more busy threads than CPUs make tasks
// wait, and the monitor sees it.
func TestQuietSeesRealContention(t *testing.T) {
	m, err := Open()
	if err != nil {
		t.Skipf("no PSI file on this kernel (%v)", err)
	}
	defer m.Close()
	spinners := runtime.NumCPU() + 2
	prev := runtime.GOMAXPROCS(spinners)
	defer runtime.GOMAXPROCS(prev)
	var stop atomic.Bool
	defer stop.Store(true)
	for range spinners {
		go func() {
			for !stop.Load() {
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.Quiet() {
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed quiet with %d threads spinning on %d CPUs", m.Path(), spinners, runtime.NumCPU())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
