package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// CertManagerVersion is the cert-manager release whose CRDs the API server
// validates our Issuers and Certificates against. It is a module the Go
// proxy serves; the tests download it into the module cache and read its
// deploy/crds, without making it a dependency of ours.
const CertManagerVersion = "v1.21.2"

// PrometheusOperatorVersion is the Prometheus Operator release whose
// ServiceMonitor and PrometheusRule CRDs check the chart's monitoring
// objects, read from its module the same way.
const PrometheusOperatorVersion = "v0.85.0"

var (
	clusterOnce sync.Once
	clusterVal  *harness.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if clusterVal != nil {
		if err := clusterVal.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the control plane:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// cluster starts, once for the package, a kube-apiserver and etcd with the
// QuantumNode CRD (from its one source, like the chart's crds/) and
// cert-manager's CRDs. Only the tests that need an API server call it.
func cluster(t *testing.T) *harness.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver; not in -short mode")
	}
	clusterOnce.Do(func() {
		start := time.Now()
		certManager, err := moduleCRDs(context.Background(), "github.com/cert-manager/cert-manager@"+CertManagerVersion, "deploy/crds")
		if err != nil {
			clusterErr = err
			return
		}
		operator, err := moduleCRDs(context.Background(), "github.com/prometheus-operator/prometheus-operator@"+PrometheusOperatorVersion,
			"example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
			"example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml")
		if err != nil {
			clusterErr = err
			return
		}
		if clusterVal, clusterErr = harness.StartCluster(); clusterErr != nil {
			return
		}
		_, err = envtest.InstallCRDs(clusterVal.Config, envtest.CRDInstallOptions{Paths: append(certManager, operator...), ErrorIfPathMissing: true})
		if err != nil {
			clusterErr = fmt.Errorf("install the cert-manager %s and Prometheus Operator %s CRDs: %w", CertManagerVersion, PrometheusOperatorVersion, err)
			return
		}
		fmt.Printf("chart: kube-apiserver with the QuantumNode, cert-manager and Prometheus Operator CRDs up in %s\n", time.Since(start).Round(time.Millisecond))
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return clusterVal
}

// moduleCRDs downloads mod into the module cache (the first time) and
// returns the paths of the named CRD files in it, checked to exist. It
// runs outside our module so that go.mod is left alone.
func moduleCRDs(ctx context.Context, mod string, files ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	scratch, err := os.MkdirTemp("", "qn-chart-crds-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = scratch // no go.mod here: ours stays untouched
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(out, &info); jsonErr == nil && info.Error != "" {
		return nil, fmt.Errorf("go mod download %s: %s", mod, info.Error)
	}
	if err != nil {
		return nil, fmt.Errorf("go mod download %s: %v\n%s%s", mod, err, out, stderr.Bytes())
	}
	var paths []string
	for _, f := range files {
		path := filepath.Join(info.Dir, f)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s has no CRDs where expected: %w", mod, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// ensureNamespace creates a namespace with labels, or sets the labels of
// one that exists.
func ensureNamespace(t *testing.T, c *harness.Cluster, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	api := c.Kube.CoreV1().Namespaces()
	ns, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create namespace %s: %v", name, err)
		}
		return
	} else if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{corev1.LabelMetadataName: name}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	if _, err := api.Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label namespace %s: %v", name, err)
	}
}

// kubectl runs the built kubectl and fails the test with its output when it
// fails.
func kubectl(t *testing.T, c *harness.Cluster, stdin string, args ...string) string {
	t.Helper()
	out, err := c.RunKubectl(context.Background(), stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
