package harness

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var controllerManagerOnce sync.Once
var controllerManagerErr error

// StartControllerManager runs the real kube-controller-manager against the
// cluster with the namespace controller, the garbage collector and the
// ValidatingAdmissionPolicy status controller only,
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
		p, err := Start(filepath.Join(assets, "kube-controller-manager"), []string{
			"--kubeconfig", c.Kubeconfig,
			"--authentication-kubeconfig", c.Kubeconfig,
			"--authorization-kubeconfig", c.Kubeconfig,
			// The status controller of ValidatingAdmissionPolicies writes
			// the API server's type check of a policy (test/vap).
			"--controllers", "namespace-controller,garbage-collector-controller,validatingadmissionpolicy-status-controller",
			"--use-service-account-credentials=true",
			"--leader-elect=false",
			"--secure-port=0",
			// Discovery of a new CRD and GC graph resync, fast enough for tests.
			"--namespace-sync-period=10s",
			"--concurrent-gc-syncs=5",
			"-v=1",
		}, ProcessOptions{StopGrace: 10 * time.Second})
		if err != nil {
			controllerManagerErr = err
			return
		}
		c.controllerManager = p
		// Ready when its controllers have a token of their own: the
		// service account the namespace controller acts as exists.
		controllerManagerErr = Eventually(context.Background(), 60*time.Second, func() error {
			select {
			case <-p.Exited():
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
