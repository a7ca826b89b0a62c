// Command pause is the sandbox ("pause") container of the test cluster's
// Pods, built in the repository so the cluster needs no registry: it holds
// the Pod's namespaces and does nothing until it is told to stop. Kept
// apart from the product; nothing ships it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// As PID 1 of its Pod it must exit on SIGTERM and SIGINT itself: the
	// kernel ignores signals a PID 1 does not handle.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// Children re-parented to it (none in a shared-nothing Pod, but a
	// process namespace may be shared) are reaped so none stays a zombie.
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
