package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/quantumnode/qn-admission/config/crd"
)

// kubeBinaries are the binaries hack/k8s-bins.sh builds into
// KUBEBUILDER_ASSETS: the control plane, and the node of test/cluster.
var kubeBinaries = []string{"kube-apiserver", "etcd", "kubectl", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}

// AssetsDir is where the kube binaries are ($KUBEBUILDER_ASSETS), checked
// to hold every one the tests run.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is empty: these tests need a real kube-apiserver and etcd. " +
			"Run them with `make test`, or `export KUBEBUILDER_ASSETS=$(./hack/k8s-bins.sh)` first")
	}
	for _, bin := range kubeBinaries {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s lacks %s: run ./hack/k8s-bins.sh", dir, bin)
		}
	}
	return dir, nil
}

// ControlPlaneOptions tune StartControlPlane.
type ControlPlaneOptions struct {
	// WithoutCRDs starts without the project's CRDs (crd.All), for a test that
	// installs them itself (or checks what happens without them).
	WithoutCRDs bool
	// MoreCRDs are installed besides the project's (another project's
	// kinds the tests read or write).
	MoreCRDs []*apiextensionsv1.CustomResourceDefinition
	// Configure changes the environment before it starts: a scheme, or
	// kube-apiserver flags.
	Configure func(*envtest.Environment)
}

// StartControlPlane starts kube-apiserver and etcd (controller-runtime's
// envtest, from AssetsDir) with the project's CRDs installed. The caller
// stops the environment.
func StartControlPlane(opts ControlPlaneOptions) (*envtest.Environment, *rest.Config, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, nil, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ErrorIfCRDPathMissing: true}
	if !opts.WithoutCRDs {
		if env.CRDs, err = crd.All(); err != nil {
			return nil, nil, err
		}
	}
	env.CRDs = append(env.CRDs, opts.MoreCRDs...)
	if opts.Configure != nil {
		opts.Configure(env)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets, err)
	}
	return env, cfg, nil
}

// ControlPlane is StartControlPlane for one test: it fails t when the
// control plane cannot start and stops it when the test ends.
func ControlPlane(t testing.TB, opts ControlPlaneOptions) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env, cfg, err := StartControlPlane(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env, cfg
}
