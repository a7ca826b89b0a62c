package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// managedProcess is a child process whose output is kept for failures.
type managedProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

func (p *managedProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

// Logs returns what the process printed so far.
func (p *managedProcess) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *managedProcess) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

var controllerManagerOnce sync.Once
var controllerManagerErr error

// StartControllerManager runs the real kube-controller-manager against the
// cluster with the namespace controller and the garbage collector only,
// each under its own service account (--use-service-account-credentials),
// exactly the identities a production control plane deletes with. envtest
// runs no controllers; tests that need a namespace to finish deleting or an
// owner cascade to happen call this first. It runs until Stop.
func (c *Cluster) StartControllerManager() error {
	controllerManagerOnce.Do(func() {
		assets, err := AssetsDir()
		if err != nil {
			controllerManagerErr = err
			return
		}
		p := &managedProcess{done: make(chan struct{})}
		p.cmd = exec.Command(filepath.Join(assets, "kube-controller-manager"),
			"--kubeconfig", c.Kubeconfig,
			"--authentication-kubeconfig", c.Kubeconfig,
			"--authorization-kubeconfig", c.Kubeconfig,
			"--controllers", "namespace-controller,garbage-collector-controller",
			"--use-service-account-credentials=true",
			"--leader-elect=false",
			"--secure-port=0",
			// Discovery of a new CRD and GC graph resync, fast enough for tests.
			"--namespace-sync-period=10s",
			"--concurrent-gc-syncs=5",
			"-v=1",
		)
		p.cmd.Stdout, p.cmd.Stderr = p, p
		if err := p.cmd.Start(); err != nil {
			controllerManagerErr = fmt.Errorf("start kube-controller-manager: %w", err)
			return
		}
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		c.controllerManager = p
		// Ready when its controllers have a token of their own: the
		// service account the namespace controller acts as exists.
		controllerManagerErr = Eventually(context.Background(), 60*time.Second, func() error {
			select {
			case <-p.done:
				return fmt.Errorf("kube-controller-manager exited: %s", lastLines(p.Logs(), 20))
			default:
			}
			_, err := c.Kube.CoreV1().ServiceAccounts("kube-system").Get(context.Background(), "namespace-controller", metav1.GetOptions{})
			return err
		})
	})
	return controllerManagerErr
}

// ControllerManagerLogs is what kube-controller-manager printed, for a
// failure message.
func (c *Cluster) ControllerManagerLogs() string {
	if c.controllerManager == nil {
		return "(not started)"
	}
	return lastLines(c.controllerManager.Logs(), 40)
}

func lastLines(s string, n int) string {
	lines := bytes.Split([]byte(s), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
