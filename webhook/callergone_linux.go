package webhook

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// connGone reads the TCP state of c without reading from it (net/http's
// own read may be waiting on it): anything but ESTABLISHED means the
// caller reset or closed the connection. A state that cannot be read
// says nothing.
func connGone(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var state uint8
	var infoErr error
	if err := raw.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO)
		if infoErr == nil {
			state = info.State
		}
	}); err != nil || infoErr != nil {
		return nil
	}
	switch state {
	case tcpEstablished:
		return nil
	case tcpCloseWait:
		return errors.New("the caller closed its connection")
	case tcpClose:
		return errors.New("the caller reset its connection")
	default:
		return fmt.Errorf("the caller's connection is closing (TCP state %d)", state)
	}
}

// TCP states of include/net/tcp_states.h.
const (
	tcpEstablished = 1
	tcpClose       = 7
	tcpCloseWait   = 8
)
