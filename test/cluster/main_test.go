package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/harness/nodecluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMain(m *testing.M) {
	os.Exit(nodecluster.RunInSandbox(m, nodecluster.Hooks{Prepare: buildImages, After: stopSuite}))
}

// The suite shares one cluster and one installed release: bringing a node
// up and installing the chart is most of the cost, and the tests read
// different things of it.
var (
	suiteOnce sync.Once
	suite     *installed
	suiteErr  error
)

// installed is the cluster with the chart installed as a user would.
type installed struct {
	*nodecluster.Cluster
	// Version is the tag `make image` gave the images.
	Version string
	// Notes is what helm install printed (NOTES.txt).
	Notes string
	// WebhookCA verifies the webhook's serving certificate; webhookIssuer
	// signs new pairs (a rotation).
	WebhookCA     []byte
	webhookIssuer *nodecluster.CA
}

const (
	releaseName      = "qn-admission"
	releaseNamespace = "qn-system"
	// redisImage is the chart's Redis, built here from Debian's
	// redis-server (the chart's default names docker.io's, which this
	// machine cannot pull).
	redisImage = "qn.local/redis:test"
)

func stopSuite() {
	if suite != nil {
		suite.Stop()
	}
}

// cluster is the suite's cluster and release, started on first use.
func cluster(t *testing.T) *installed {
	t.Helper()
	nodecluster.Require(t)
	suiteOnce.Do(func() { suite, suiteErr = setUp() })
	if suiteErr != nil {
		t.Fatal(suiteErr)
	}
	return suite
}

func logf(format string, args ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05.0")}, args...)...)
}

func setUp() (*installed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	assets, err := harness.AssetsDir()
	if err != nil {
		return nil, err
	}
	coredns := os.Getenv("QN_COREDNS")
	if coredns == "" {
		return nil, fmt.Errorf("QN_COREDNS is empty: run these tests with `make test`, or export QN_COREDNS=$(./hack/coredns.sh)")
	}
	c, err := nodecluster.Start(ctx, nodecluster.Options{KubeBinaries: assets, CoreDNS: coredns, Log: logf})
	if err != nil {
		return nil, err
	}
	s := &installed{Cluster: c}
	var archives []string
	if s.Version, archives, err = builtImages(); err != nil {
		return s, err
	}
	for _, a := range archives {
		if err := c.ImportImage(ctx, a); err != nil {
			return s, err
		}
	}
	logf("images imported (%s)", time.Since(start).Round(time.Second))
	if err := s.install(ctx); err != nil {
		return s, err
	}
	logf("chart installed and every Pod ready (%s)", time.Since(start).Round(time.Second))
	return s, nil
}

// imagesDir is where buildImages leaves the image archives, in the
// sandbox's shared directory.
func imagesDir(shared string) string { return filepath.Join(shared, "images") }

// buildImages runs, outside the sandbox (it may download modules), `make
// image` for this machine as the README says, and builds the Redis image.
func buildImages(shared string) error {
	start := time.Now()
	dir := imagesDir(shared)
	cmd := exec.Command("make", "--no-print-directory", "-C", harness.ModuleRoot(), "image",
		"PLATFORMS=linux/"+runtime.GOARCH, "IMAGES=qn-webhook qn-controller",
		"BIN="+filepath.Join(dir, "bin"), "IMAGE_DIR="+filepath.Join(dir, "layouts"))
	// A make that runs this test must not hand its jobserver to this one.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MAKELEVEL" && k != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", cmd, err, out.String())
	}
	index, err := os.ReadFile(filepath.Join(dir, "layouts", "images.json"))
	if err != nil {
		return err
	}
	var list []struct {
		Name, Tag, Layout string
	}
	if err := json.Unmarshal(index, &list); err != nil {
		return fmt.Errorf("read images.json: %w", err)
	}
	for _, img := range list {
		if err := nodecluster.ArchiveLayout(filepath.Join(dir, "layouts", img.Layout), filepath.Join(dir, img.Name+".tar")); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "tag"), []byte(img.Tag), 0o600); err != nil {
			return err
		}
	}
	files, err := nodecluster.HostFiles("/usr/bin/redis-server", "/bin/sh")
	if err != nil {
		return err
	}
	if err := nodecluster.WriteImage(nodecluster.ImageSpec{
		Ref: redisImage, Files: files, Dirs: []string{"/data"},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd: []string{"redis-server"},
	}, filepath.Join(dir, "redis.tar")); err != nil {
		return err
	}
	logf("make image and the Redis image: %s", time.Since(start).Round(time.Second))
	return nil
}

// builtImages are buildImages' tag and archives, seen from inside.
func builtImages() (string, []string, error) {
	dir := imagesDir(nodecluster.SharedDir())
	tag, err := os.ReadFile(filepath.Join(dir, "tag"))
	if err != nil {
		return "", nil, fmt.Errorf("the images built before the sandbox: %w", err)
	}
	archives, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil || len(archives) != 3 {
		return "", nil, fmt.Errorf("want 3 image archives in %s, found %v (%v)", dir, archives, err)
	}
	return string(tag), archives, nil
}

// webhookSecret makes the serving pair the chart's secret mode mounts,
// signed by a CA of its own.
func (s *installed) webhookSecret(ctx context.Context) (caBundle string, err error) {
	ca, err := nodecluster.NewCA("qn-admission-webhook-ca")
	if err != nil {
		return "", err
	}
	s.WebhookCA, s.webhookIssuer = ca.CertPEM, ca
	pair, err := s.webhookPair()
	if err != nil {
		return "", err
	}
	if _, err := s.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	_, err = s.Kube.CoreV1().Secrets(releaseNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhookSecretName},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: pair.CertPEM, corev1.TLSPrivateKeyKey: pair.KeyPEM},
	}, metav1.CreateOptions{})
	return base64.StdEncoding.EncodeToString(ca.CertPEM), err
}

const webhookSecretName = "qn-admission-webhook-tls"

// webhookPair is a new serving pair for the webhook's Service name.
func (s *installed) webhookPair() (nodecluster.Pair, error) {
	service := releaseName + "-webhook." + releaseNamespace + ".svc"
	return s.webhookIssuer.Issue(nodecluster.CertRequest{CommonName: service, DNSNames: []string{service, service + ".cluster.local"}})
}
