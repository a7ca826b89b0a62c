package controller

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// kube-controller-manager runs, once started, for the rest of the package's
// tests: the real Deployment, ReplicaSet and disruption (PodDisruptionBudget
// status) controllers. envtest runs none; the self-healing tests need
// owners that recreate evicted Pods and budgets that refuse evictions.
var kcm struct {
	once sync.Once
	err  error
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startControllerManager starts kube-controller-manager against the shared
// control plane, or fails the test.
func (h *harness) startControllerManager(t *testing.T) {
	t.Helper()
	kcm.once.Do(func() {
		dir, err := os.MkdirTemp("", "qn-kcm-")
		if err != nil {
			kcm.err = err
			return
		}
		kubeconfig := filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(kubeconfig, h.kubeconfig, 0o600); err != nil {
			kcm.err = err
			return
		}
		kcm.logs = &syncBuffer{}
		kcm.done = make(chan struct{})
		kcm.cmd = exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager"),
			"--kubeconfig", kubeconfig,
			"--controllers", "deployment-controller,replicaset-controller,disruption-controller",
			"--leader-elect=false",
			"--secure-port=0",
			"-v=1",
		)
		kcm.cmd.Stdout, kcm.cmd.Stderr = kcm.logs, kcm.logs
		if err := kcm.cmd.Start(); err != nil {
			kcm.err = fmt.Errorf("start kube-controller-manager (built by hack/k8s-bins.sh): %w", err)
			return
		}
		go func() { _ = kcm.cmd.Wait(); close(kcm.done) }()
		select {
		case <-kcm.done:
			kcm.err = fmt.Errorf("kube-controller-manager exited at once:\n%s", kcm.logs.String())
		case <-time.After(time.Second):
		}
	})
	if kcm.err != nil {
		t.Fatal(kcm.err)
	}
}

func stopControllerManager() {
	if kcm.cmd == nil || kcm.cmd.Process == nil {
		return
	}
	_ = kcm.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-kcm.done:
	case <-time.After(10 * time.Second):
		_ = kcm.cmd.Process.Kill()
		<-kcm.done
	}
}
