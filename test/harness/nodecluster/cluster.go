// Package nodecluster starts a real one-node Kubernetes cluster on this
// machine for tests that run the chart and our images as Pods: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler (built by
// hack/k8s-bins.sh), containerd and runc with the bridge CNI plugin
// (Debian's packages), the kubelet and kube-proxy in nftables mode, and
// CoreDNS (hack/coredns.sh) for Service names. Images come from files, never
// a registry: a pause image built here, images of Debian binaries
// (HostFiles), and `make image`'s layouts, imported into containerd.
//
// Everything runs inside namespaces the test binary makes for itself
// (RunInSandbox), so the host is left as it was found, processes, mounts,
// bridge and nftables included, even when a test fails or panics.
package nodecluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The cluster's addresses, all inside its own network namespace.
const (
	// NodeIP is the node's address: the pod bridge's gateway, where the API
	// server, the kubelet and CoreDNS listen for Pods.
	NodeIP = "10.88.0.1"
	// PodCIDR is the pod network on the bridge.
	PodCIDR = "10.88.0.0/16"
	// ServiceCIDR is where Services get their ClusterIPs.
	ServiceCIDR = "10.96.0.0/16"
	// KubernetesServiceIP is the `kubernetes` Service's ClusterIP.
	KubernetesServiceIP = "10.96.0.1"
	// NodeName is the one node's name.
	NodeName = "qn-node"
	// PauseImage is the sandbox image, built here (see pause/).
	PauseImage = "qn.local/pause:test"

	apiServerPort = "6443"
	bridgeName    = "qn0"
)

// auditPolicy logs QuantumNode writes (and their status's) at Metadata
// level, nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
  resources: [{group: qn.dev, resources: [quantumnodes, quantumnodes/status]}]
- level: None
`

// Options say where the binaries are.
type Options struct {
	// KubeBinaries is hack/k8s-bins.sh's directory (KUBEBUILDER_ASSETS).
	KubeBinaries string
	// CoreDNS is hack/coredns.sh's binary.
	CoreDNS string
	// Log, when set, receives a line per step with its time.
	Log func(format string, args ...any)
}

// Cluster is a running one-node cluster.
type Cluster struct {
	Dir        string
	Kubeconfig string // admin (system:masters) kubeconfig
	Kubectl    string
	Config     *rest.Config
	Kube       kubernetes.Interface
	Dynamic    dynamic.Interface
	// CA signed the API server's certificate and the admin's; a test may
	// issue more with it.
	CA *CA
	// AuditLog is the API server's audit log: writes of QuantumNodes and
	// their status at Metadata level (who, from which address, when).
	AuditLog string

	opts      Options
	ctrSocket string
	mu        sync.Mutex
	procs     []*harness.Process
}

// Start brings the cluster up and waits until the node is Ready. It must
// run inside RunInSandbox's namespaces. On error, what started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if !Inside() {
		return nil, fmt.Errorf("nodecluster.Start runs only inside RunInSandbox's namespaces")
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	dir, err := os.MkdirTemp(os.Getenv(dirEnv), "c")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, opts: opts, Kubectl: filepath.Join(opts.KubeBinaries, "kubectl"), ctrSocket: filepath.Join(dir, "containerd.sock")}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.Diagnose())
			c.Stop()
		}
	}()
	start := time.Now()
	step := func(what string) { opts.Log("cluster: %s (%s)", what, time.Since(start).Round(100*time.Millisecond)) }
	for _, d := range []string{"pki", "etcd", "cni", "kubelet", "pod-logs", "containerd", "ipam"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := c.network(); err != nil {
		return nil, err
	}
	if err := c.writePKI(); err != nil {
		return nil, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return nil, err
	}
	step("control plane ready")
	if err := c.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := c.importPause(ctx); err != nil {
		return nil, err
	}
	step("containerd ready, pause image imported")
	if err := c.startNode(); err != nil {
		return nil, err
	}
	if err := harness.Eventually(ctx, 2*time.Minute, c.nodeReady); err != nil {
		return nil, fmt.Errorf("node %s Ready: %w", NodeName, err)
	}
	step("node Ready")
	return c, nil
}

// network makes the pod bridge with the node's address; the bridge CNI
// plugin attaches Pods to it.
func (c *Cluster) network() error {
	for _, s := range [][]string{
		{"ip", "link", "add", bridgeName, "type", "bridge"},
		{"ip", "addr", "add", NodeIP + "/16", "dev", bridgeName},
		{"ip", "link", "set", bridgeName, "up"},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "qn-pods",
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "rangeStart": "10.88.0.10", "gateway": %q}]],
             "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}`, bridgeName, filepath.Join(c.Dir, "ipam"), PodCIDR, NodeIP)
	return os.WriteFile(filepath.Join(c.Dir, "cni", "10-qn-pods.conflist"), []byte(conf), 0o600)
}

func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.Dir}, parts...)...)
}

func (c *Cluster) writePKI() error {
	ca, err := NewCA("qn-node-cluster-ca")
	if err != nil {
		return err
	}
	c.CA = ca
	if err := os.WriteFile(c.path("pki", "ca.crt"), ca.CertPEM, 0o600); err != nil {
		return err
	}
	serving, err := ca.Issue(CertRequest{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:        []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP), net.ParseIP(KubernetesServiceIP)},
	})
	if err != nil {
		return err
	}
	if _, _, err := serving.Write(c.path("pki"), "apiserver"); err != nil {
		return err
	}
	admin, err := ca.Issue(CertRequest{CommonName: "qn-node-admin", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	certFile, keyFile, err := admin.Write(c.path("pki"), "admin")
	if err != nil {
		return err
	}
	if _, _, err := serviceAccountKey(c.path("pki")); err != nil {
		return err
	}
	c.Kubeconfig = c.path("admin.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: qn-node
  cluster: {server: "https://%s:%s", certificate-authority: %q}
users:
- name: admin
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: qn-node
  context: {cluster: qn-node, user: admin, namespace: default}
current-context: qn-node
`, NodeIP, apiServerPort, c.path("pki", "ca.crt"), certFile, keyFile)
	if err := os.WriteFile(c.Kubeconfig, []byte(kc), 0o600); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cfg.WarningHandler = rest.NoWarnings{}
	c.Config = cfg
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	c.Dynamic, err = dynamic.NewForConfig(cfg)
	return err
}

// start runs one of the cluster's processes, kept for Stop and Diagnose.
func (c *Cluster) start(bin string, args ...string) (*harness.Process, error) {
	p, err := harness.Start(bin, args, harness.ProcessOptions{KeepLast: 256 << 10, StopGrace: 15 * time.Second})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

func (c *Cluster) kubeBin(name string) string { return filepath.Join(c.opts.KubeBinaries, name) }

func (c *Cluster) startControlPlane(ctx context.Context) error {
	if _, err := c.start(c.kubeBin("etcd"),
		"--data-dir", c.path("etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "default=http://127.0.0.1:2380",
		"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}
	pki := func(f string) string { return c.path("pki", f) }
	c.AuditLog = c.path("audit.log")
	if err := os.WriteFile(c.path("audit-policy.yaml"), []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	if _, err := c.start(c.kubeBin("kube-apiserver"),
		"--audit-policy-file", c.path("audit-policy.yaml"), "--audit-log-path", c.AuditLog,
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", "0.0.0.0", "--secure-port", apiServerPort, "--advertise-address", NodeIP,
		"--tls-cert-file", pki("apiserver.crt"), "--tls-private-key-file", pki("apiserver.key"),
		"--client-ca-file", pki("ca.crt"),
		"--service-account-key-file", pki("sa.pub"), "--service-account-signing-key-file", pki("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range", ServiceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--kubelet-client-certificate", pki("admin.crt"), "--kubelet-client-key", pki("admin.key"),
		// The node's name resolves nowhere: logs and exec go to its address.
		"--kubelet-preferred-address-types", "InternalIP",
		// Webhooks are called on their Pods' addresses, as on a control
		// plane without kube-proxy of its own.
		"--enable-aggregator-routing=true",
		"--allow-privileged=true",
		"--profiling=false", "-v=1"); err != nil {
		return err
	}
	if err := harness.Eventually(ctx, 90*time.Second, func() error {
		_, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("kube-apiserver ready: %w", err)
	}
	if _, err := c.start(c.kubeBin("kube-controller-manager"),
		"--kubeconfig", c.Kubeconfig, "--authentication-kubeconfig", c.Kubeconfig, "--authorization-kubeconfig", c.Kubeconfig,
		"--service-account-private-key-file", pki("sa.key"), "--root-ca-file", pki("ca.crt"),
		"--use-service-account-credentials=true", "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "10257",
		"--cluster-name", "qn-node", "-v=1"); err != nil {
		return err
	}
	if _, err := c.start(c.kubeBin("kube-scheduler"),
		"--kubeconfig", c.Kubeconfig, "--authentication-kubeconfig", c.Kubeconfig, "--authorization-kubeconfig", c.Kubeconfig,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "10259", "-v=1"); err != nil {
		return err
	}
	corefile := fmt.Sprintf(`.:53 {
    bind %s
    errors
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s qn-node
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
`, NodeIP, c.Kubeconfig)
	if err := os.WriteFile(c.path("Corefile"), []byte(corefile), 0o600); err != nil {
		return err
	}
	if _, err := c.start(c.opts.CoreDNS, "-conf", c.path("Corefile")); err != nil {
		return err
	}
	// Pods run once their service account exists (the token controller
	// and the service account controller of kube-controller-manager).
	return harness.Eventually(ctx, 60*time.Second, func() error {
		_, err := c.Kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # runc cannot set oom_score_adj below its own in this sandbox.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, c.path("containerd", "root"), c.path("containerd", "state"), c.ctrSocket, c.path("containerd", "opt"),
		PauseImage, CNIPluginDir, c.path("cni"))
	if err := os.WriteFile(c.path("containerd.toml"), []byte(config), 0o600); err != nil {
		return err
	}
	if _, err := c.start("containerd", "--config", c.path("containerd.toml"), "--log-level", "warn"); err != nil {
		return err
	}
	return harness.Eventually(ctx, 30*time.Second, func() error {
		_, err := c.ctr(ctx, "version")
		return err
	})
}

func (c *Cluster) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.ctrSocket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// ImportImage loads an image archive (WriteImage, ArchiveLayout) into the
// node's containerd, where the kubelet finds it without pulling.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	_, err := c.ctr(ctx, "images", "import", "--no-unpack=false", archive)
	return err
}

// Images lists the images the node's containerd holds.
func (c *Cluster) Images(ctx context.Context) (string, error) {
	return c.ctr(ctx, "images", "list", "-q")
}

func (c *Cluster) importPause(ctx context.Context) error {
	bin, err := harness.Build(ctx, c.Dir, "./test/harness/nodecluster/pause")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	archive := c.path("pause.tar")
	if err := WriteImage(ImageSpec{Ref: PauseImage, Files: []ImageFile{{Path: "/pause", Data: data, Mode: 0o755}}, Entrypoint: []string{"/pause"}, User: "65535:65535"}, archive); err != nil {
		return err
	}
	return c.ImportImage(ctx, archive)
}

func (c *Cluster) startNode() error {
	resolv := c.path("resolv.conf")
	// Pods reach no resolver but the cluster's: the host's is outside
	// this network namespace.
	if err := os.WriteFile(resolv, nil, 0o644); err != nil {
		return err
	}
	kubeletConfig := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: %q
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
clusterDNS: [%q]
clusterDomain: cluster.local
resolvConf: %q
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
podLogsDir: %q
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
protectKernelDefaults: false
# Mounted Secrets and ConfigMaps follow their objects within ~10 s (a
# rotated certificate, a policy push), not the default minute.
syncFrequency: 10s
`, os.Getenv(cgroupRootEnv), c.ctrSocket, c.path("pki", "ca.crt"), NodeIP, resolv, c.path("pod-logs"))
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(kubeletConfig), 0o600); err != nil {
		return err
	}
	if _, err := c.start(c.kubeBin("kubelet"),
		"--config", c.path("kubelet.yaml"), "--kubeconfig", c.Kubeconfig,
		"--root-dir", c.path("kubelet"), "--hostname-override", NodeName, "--node-ip", NodeIP, "-v=1"); err != nil {
		return err
	}
	proxyConfig := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: %q}
hostnameOverride: %s
clusterCIDR: %s
# Service traffic between Pods on one bridge comes back through this
# namespace without br_netfilter.
nftables: {masqueradeAll: true}
# Leave the conntrack settings as they are: some are not per namespace.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, c.Kubeconfig, NodeName, PodCIDR)
	if err := os.WriteFile(c.path("kube-proxy.yaml"), []byte(proxyConfig), 0o600); err != nil {
		return err
	}
	_, err := c.start(c.kubeBin("kube-proxy"), "--config", c.path("kube-proxy.yaml"), "-v=1")
	return err
}

func (c *Cluster) nodeReady() error {
	if err := c.exited(); err != nil {
		return err
	}
	n, err := c.Kube.CoreV1().Nodes().Get(context.Background(), NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s not Ready: %s", NodeName, cond.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", NodeName)
}

// exited is an error naming any of the cluster's processes that has exited.
func (c *Cluster) exited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited (code %d):\n%s", p.Name(), p.ExitCode(), tail(p.Logs(), 30))
		default:
		}
	}
	return nil
}

// Diagnose is the tail of every process's output, for a failure message.
func (c *Cluster) Diagnose() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", p.Name(), tail(p.Logs(), 15))
	}
	return b.String()
}

// ProcessLogs is what the named process (e.g. "kubelet") printed.
func (c *Cluster) ProcessLogs(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.Name() == name {
			return p.Logs()
		}
	}
	return ""
}

// Stop stops the node first (its Pods with it), then the control plane,
// and removes the cluster's files. Whatever it misses ends with the
// sandbox's PID namespace.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := append([]*harness.Process(nil), c.procs...)
	c.mu.Unlock()
	if c.ctrSocket != "" {
		// Containers first, so no shim outlives containerd.
		if out, err := c.ctr(context.Background(), "tasks", "list", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				_, _ = c.ctr(context.Background(), "tasks", "kill", "--signal", "SIGKILL", id)
			}
		}
	}
	for i := len(procs) - 1; i >= 0; i-- {
		_ = procs[i].Stop()
	}
	// Mounts under the directory (overlays, volumes) go before it.
	unmountUnder(c.Dir)
	_ = os.RemoveAll(c.Dir)
}

func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			points = append(points, f[1])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = exec.Command("umount", "-l", points[i]).Run()
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
