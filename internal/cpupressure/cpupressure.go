// Package cpupressure tells whether tasks have been waiting for a CPU, from
// the kernel's pressure stall information (PSI): the cumulative time during
// which at least one runnable task of the cgroup (or of the machine) waited
// for a CPU. Background work that must not slow anything (the shadow's
// judgements) runs only while that time stands still.
package cpupressure

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/quantumnode/qn-admission/internal/clip"
)

// lineBytes is how much of /proc's pressure file an error quotes.
const lineBytes = 120

// Paths are the PSI files tried in order: the cgroup's own (cgroup v2,
// what a container's tasks wait for, throttling included) and the
// machine's.
var Paths = []string{"/sys/fs/cgroup/cpu.pressure", "/proc/pressure/cpu"}

// Defaults of a Monitor.
const (
	// DefaultWindow is the shortest span a verdict covers: shorter spans
	// reuse the last verdict, as a read costs a few microseconds.
	DefaultWindow = 10 * time.Millisecond
	// DefaultTolerance is the share of a span tasks may have waited for a
	// CPU and still count as quiet.
	DefaultTolerance = 0.01
)

// Monitor follows one PSI file.
type Monitor struct {
	path      string
	window    time.Duration
	tolerance float64

	mu    sync.Mutex
	file  *os.File
	buf   []byte
	last  time.Duration // stall total at lastAt
	at    time.Time
	quiet bool
}

// Open follows the first of Paths that can be read.
func Open() (*Monitor, error) {
	var errs []error
	for _, p := range Paths {
		m, err := OpenFile(p)
		if err == nil {
			return m, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// OpenFile follows one PSI file (a cpu.pressure or /proc/pressure/cpu).
func OpenFile(path string) (*Monitor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	m := &Monitor{path: path, window: DefaultWindow, tolerance: DefaultTolerance, file: f, buf: make([]byte, 512)}
	total, err := m.read()
	if err != nil {
		f.Close()
		return nil, err
	}
	m.last, m.at, m.quiet = total, time.Now(), true
	return m, nil
}

// Path is the PSI file the monitor reads.
func (m *Monitor) Path() string { return m.path }

// Quiet says no task waited for a CPU (beyond the tolerance) since the
// previous verdict at least a window ago. Should the file stop reading,
// nothing is quiet.
func (m *Monitor) Quiet() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	span := now.Sub(m.at)
	if span < m.window {
		return m.quiet
	}
	total, err := m.read()
	if err != nil {
		m.quiet = false
		return false
	}
	m.quiet = float64(total-m.last) <= m.tolerance*float64(span)
	m.last, m.at = total, now
	return m.quiet
}

// Close releases the file.
func (m *Monitor) Close() error { return m.file.Close() }

// read returns the "some" line's total: microseconds during which at least
// one task waited for a CPU.
func (m *Monitor) read() (time.Duration, error) {
	n, err := m.file.ReadAt(m.buf, 0)
	if n == 0 && err != nil {
		return 0, fmt.Errorf("reading %s: %w", m.path, err)
	}
	us, err := SomeTotal(m.buf[:n])
	if err != nil {
		return 0, fmt.Errorf("%s: %w", m.path, err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// SomeTotal parses the total of the "some" line of a PSI file, in
// microseconds.
func SomeTotal(psi []byte) (uint64, error) {
	line, _, _ := bytes.Cut(psi, []byte("\n"))
	if !bytes.HasPrefix(line, []byte("some ")) {
		return 0, fmt.Errorf("no \"some\" line first in %q", clip.Bytes(psi, lineBytes))
	}
	for _, field := range bytes.Fields(line[len("some "):]) {
		if v, ok := bytes.CutPrefix(field, []byte("total=")); ok {
			total, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("total %q of the \"some\" line is not a count of microseconds", v)
			}
			return total, nil
		}
	}
	return 0, fmt.Errorf("no total= in the \"some\" line %q", clip.Bytes(line, lineBytes))
}
