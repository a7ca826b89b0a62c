package app

import (
	"syscall"
)

// DefaultMaxConnections caps open admission connections. The apiserver
// keeps a handful of keep-alive connections per replica; a thousand leaves
// room for many apiservers and stays well inside common descriptor limits.
// At the cap, idle and silent connections make room for new ones
// (webhook.Server), so the cap bounds descriptors without letting parked
// sockets lock callers out.
const DefaultMaxConnections = 1000

// fdReserve is what the admission listener may never take of the
// process's file descriptors: the probe listener and its kubelet and
// Prometheus connections, certificate and policy re-reads, file watches and
// the decision log.
const fdReserve = 128

// connectionLimit returns the connection cap to apply: requested, lowered
// so that fdReserve descriptors always stay free, and the soft descriptor
// limit it was checked against (0 when unknown or unlimited).
func connectionLimit(requested int) (limit int, fdLimit uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == ^uint64(0) {
		return requested, 0
	}
	room := int64(rl.Cur) - fdReserve
	if room < 1 {
		room = 1
	}
	return int(min(int64(requested), room)), rl.Cur
}
