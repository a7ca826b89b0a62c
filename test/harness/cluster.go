package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// QuantumNodes is the QuantumNode resource, for dynamic clients.
var QuantumNodes = schema.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"}

// Scalers is the HorizontalQNScaler resource, whose queries qn-webhook parses.
var Scalers = schema.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "horizontalqnscalers"}

// Cluster is a running kube-apiserver and etcd with the project's CRDs,
// an admin kubeconfig for the built kubectl, and the API server's audit
// log: what the end-to-end and chart suites run against.
type Cluster struct {
	Env        *envtest.Environment
	Config     *rest.Config
	Kube       kubernetes.Interface
	Dynamic    dynamic.Interface
	Kubeconfig string // a file for kubectl, as an admin user
	Kubectl    string // the kubectl built with the apiserver
	// AsKubectlUser is a client with kubectl's identity, for tests where
	// who makes a change matters (rate windows are per user).
	AsKubectlUser dynamic.Interface
	// AuditLog is the apiserver's audit log (QuantumNode writes at
	// RequestResponse level, as docs/policies.md asks for qnctl impact),
	// where webhook audit annotations land.
	AuditLog string
	dir      string
	// controllerManager runs once a test asks for it (see
	// StartControllerManager).
	controllerManager *Process
}

// auditPolicy logs QuantumNode writes with their objects, requester and
// audit annotations (what qnctl impact replays), reads at Metadata level,
// and nothing else: the policy docs/policies.md recommends.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  verbs: [create, update, patch, delete, deletecollection]
  resources: [{group: qn.dev, resources: [quantumnodes, quantumnodes/status]}]
- level: Metadata
  resources: [{group: qn.dev, resources: [quantumnodes]}]
- level: None
`

// StartCluster starts the control plane and installs the QuantumNode CRD
// from its one source.
func StartCluster() (*Cluster, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "qn-e2e-")
	if err != nil {
		return nil, err
	}
	policyFile := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policyFile, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	auditLog := filepath.Join(dir, "audit.log")
	env, cfg, err := StartControlPlane(ControlPlaneOptions{Configure: func(env *envtest.Environment) {
		env.ControlPlane.GetAPIServer().Configure().
			Append("audit-policy-file", policyFile).
			Append("audit-log-path", auditLog).
			Append("audit-log-mode", "blocking")
	}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{Env: env, Config: cfg, Kubectl: filepath.Join(assets, "kubectl"), dir: dir, AuditLog: auditLog}
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, c.stopWith(err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, c.stopWith(err)
	}
	admin, err := env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, c.stopWith(err)
	}
	asUser := admin.Config()
	asUser.QPS, asUser.Burst = 500, 500 // client-go throttles to 5 QPS by default
	if c.AsKubectlUser, err = dynamic.NewForConfig(asUser); err != nil {
		return nil, c.stopWith(err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		return nil, c.stopWith(err)
	}
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kc, 0o600); err != nil {
		return nil, c.stopWith(err)
	}
	return c, nil
}

func (c *Cluster) stopWith(err error) error {
	if stopErr := c.Stop(); stopErr != nil {
		return fmt.Errorf("%w (and stopping the control plane: %v)", err, stopErr)
	}
	return err
}

// Stop shuts the control plane down and removes its files.
func (c *Cluster) Stop() error {
	if c.controllerManager != nil {
		_ = c.controllerManager.Stop()
	}
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
	return c.Env.Stop()
}

// As is a dynamic client that acts as user in groups (the admin
// impersonates them), without client-go's default throttle and with
// warnings dropped: requests whose requester matters (roles, rate windows
// per user) as that user makes them.
func (c *Cluster) As(user string, groups ...string) (dynamic.Interface, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	cfg.QPS, cfg.Burst = 500, 500
	cfg.WarningHandler = rest.NoWarnings{}
	return dynamic.NewForConfig(cfg)
}

// RunKubectl runs the built kubectl against the cluster with stdin, and
// returns its combined output.
func (c *Cluster) RunKubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewBufferString(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
