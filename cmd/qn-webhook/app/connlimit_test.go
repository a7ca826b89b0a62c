package app

import (
	"syscall"
	"testing"
)

func TestConnectionLimitLeavesDescriptorsForProbesAndReloads(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == ^uint64(0) {
		t.Skip("no finite descriptor limit to check against")
	}
	if got, fdLimit := connectionLimit(int(rl.Cur) * 2); got != int(rl.Cur)-fdReserve || fdLimit != rl.Cur {
		t.Fatalf("asking for twice the %d descriptors: cap %d (limit %d), want %d", rl.Cur, got, fdLimit, int(rl.Cur)-fdReserve)
	}
	if got, _ := connectionLimit(10); got != 10 {
		t.Fatalf("a cap below the descriptor limit is kept: got %d, want 10", got)
	}
}

func TestBoundsMustBePositive(t *testing.T) {
	for name, set := range map[string]func(*Options){
		"--max-request-elements":   func(o *Options) { o.MaxRequestElements = 0 },
		"--max-concurrent-reviews": func(o *Options) { o.MaxConcurrentReviews = -1 },
		"--max-connections":        func(o *Options) { o.MaxConnections = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			o.TLSSelfSigned = true
			set(o)
			if err := o.Validate(); err == nil || err.Error()[:len(name)] != name {
				t.Fatalf("want an error naming %s, got %v", name, err)
			}
		})
	}
}
