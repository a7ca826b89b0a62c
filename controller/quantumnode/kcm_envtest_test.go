package quantumnode

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	testharness "github.com/quantumnode/qn-admission/test/harness"
)

// kube-controller-manager runs, once started, for the rest of the package's
// tests: the real Deployment, ReplicaSet and disruption (PodDisruptionBudget
// status) controllers. envtest runs none; the self-healing tests need
// owners that recreate evicted Pods.
var kcm struct {
	once sync.Once
	err  error
	p    *testharness.Process
}

// startControllerManager starts kube-controller-manager against the shared
// control plane, or fails the test.
func (h *harness) startControllerManager(t *testing.T) {
	t.Helper()
	kcm.once.Do(func() {
		assets, err := testharness.AssetsDir()
		if err != nil {
			kcm.err = err
			return
		}
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
		kcm.p, kcm.err = testharness.Start(filepath.Join(assets, "kube-controller-manager"), []string{
			"--kubeconfig", kubeconfig,
			"--controllers", "deployment-controller,replicaset-controller,disruption-controller",
			"--leader-elect=false",
			"--secure-port=0",
			"-v=1",
		}, testharness.ProcessOptions{StopGrace: 10 * time.Second})
		if kcm.err != nil {
			return
		}
		select {
		case <-kcm.p.Exited():
			kcm.err = fmt.Errorf("kube-controller-manager exited at once:\n%s", kcm.p.Logs())
		case <-time.After(time.Second):
		}
	})
	if kcm.err != nil {
		t.Fatal(kcm.err)
	}
}

func stopControllerManager() {
	if kcm.p != nil {
		_ = kcm.p.Stop()
	}
}
