package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProcStats is what /proc says about a process at one moment.
type ProcStats struct {
	// CPU is user + system time (utime + stime of /proc/<pid>/stat).
	CPU time.Duration
	// RSS is VmRSS and HWM is VmHWM (peak RSS) of /proc/<pid>/status, bytes.
	RSS uint64
	HWM uint64
	// RSSAnon and RSSFile split VmRSS: memory the process allocated
	// (heap, stacks) and pages of mapped files, mostly the binary's code
	// and read-only data, which grow as more code paths run once.
	RSSAnon, RSSFile uint64
}

var clockTicks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100 // USER_HZ on every Linux we run on
})

// ReadProc reads CPU time and memory of pid from /proc.
func ReadProc(pid int) (ProcStats, error) {
	var s ProcStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted after its closing parenthesis. utime and stime are
	// fields 14 and 15, i.e. the 12th and 13th after it.
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return s, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, fields[11], fields[12])
	}
	s.CPU = time.Duration(utime+stime) * time.Second / time.Duration(clockTicks())
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch key {
		case "VmRSS":
			s.RSS = parseKB(val)
		case "VmHWM":
			s.HWM = parseKB(val)
		case "RssAnon":
			s.RSSAnon = parseKB(val)
		case "RssFile":
			s.RSSFile = parseKB(val)
		}
	}
	return s, nil
}

func parseKB(v string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n * 1024
}

// MachineCPU is the whole machine's busy and total CPU time from
// /proc/stat (all cores), to tell how busy other processes kept it.
type MachineCPU struct {
	Busy, Total time.Duration
	// Nice is the part of Busy spent in processes with a positive nice
	// value (background builds): they yield to the servers and the load
	// generator, which run at nice 0.
	Nice time.Duration
}

// ReadMachineCPU reads the first line of /proc/stat.
func ReadMachineCPU() (MachineCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var total, idle, nice int64
	// user nice system idle iowait irq softirq steal (guest time is
	// already inside user and nice).
	for i, f := range fields[1:min(len(fields), 9)] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("/proc/stat: %q: %v", f, err)
		}
		total += n
		switch i {
		case 1:
			nice = n
		case 3, 4:
			idle += n
		}
	}
	tick := time.Second / time.Duration(clockTicks())
	return MachineCPU{Busy: time.Duration(total-idle) * tick, Total: time.Duration(total) * tick, Nice: time.Duration(nice) * tick}, nil
}

// MemoryTotal is the machine's memory (MemTotal of /proc/meminfo), bytes;
// 0 when unreadable.
func MemoryTotal() uint64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "MemTotal" {
			return parseKB(v)
		}
	}
	return 0
}
