package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// PIDOf finds a running process of binary (its file name) whose command
// line contains part, for what /proc says of a process this package did
// not start itself (envtest's kube-apiserver and etcd).
func PIDOf(binary, part string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(cmdline, []byte{0})
		if len(args) > 0 && filepath.Base(string(args[0])) == binary && bytes.Contains(cmdline, []byte(part)) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s process with %s on its command line", binary, part)
}

// APIServerPID is the process id of the cluster's kube-apiserver, found by
// its certificate directory.
func (c *Cluster) APIServerPID() (int, error) {
	return PIDOf("kube-apiserver", c.Env.ControlPlane.APIServer.CertDir)
}

// EtcdPID is the process id of the cluster's etcd, found by its data
// directory.
func (c *Cluster) EtcdPID() (int, error) {
	return PIDOf("etcd", c.Env.ControlPlane.Etcd.DataDir)
}
