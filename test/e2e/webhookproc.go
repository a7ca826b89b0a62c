package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/quantumnode/qn-admission/rego"
)

// BuildTags are the build tags the Makefile's BUILD_TAGS gives every
// binary: tests and benchmarks run qn-webhook as it is shipped.
const BuildTags = "nomsgpack"

// BuildWebhook compiles cmd/qn-webhook into dir: the suite runs the real
// binary, flags and all.
func BuildWebhook(ctx context.Context, dir string) (string, error) {
	return BuildBinary(ctx, dir, "qn-webhook")
}

// BuildBinary compiles cmd/<name> into dir as the Makefile builds it and
// returns the binary's path.
func BuildBinary(ctx context.Context, dir, name string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", BuildTags, "-o", bin, "./cmd/"+name)
	cmd.Dir = ModuleRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// WebhookProcess is a running qn-webhook.
type WebhookProcess struct {
	cmd      *exec.Cmd
	Address  string // host:port of the HTTPS listener
	Probe    string // host:port of the probe listener
	CABundle []byte
	mu       sync.Mutex
	logs     bytes.Buffer
	exited   chan struct{}
}

// StartWebhook runs bin with self-signed TLS in certDir on free loopback
// ports, plus extra flags, and waits until it says it is serving.
func StartWebhook(bin, certDir string, extra ...string) (*WebhookProcess, error) {
	args := append([]string{
		"--tls-self-signed", "--tls-self-signed-dir", certDir,
		"--listen-address", "127.0.0.1:0", "--probe-address", "127.0.0.1:0",
		"--log-format", "json",
	}, extra...)
	w := &WebhookProcess{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w.cmd.Stderr = &lockedWriter{w: &w.logs, mu: &w.mu}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	serving := make(chan struct{ addr, probe string }, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			w.mu.Lock()
			w.logs.Write(line)
			w.logs.WriteByte('\n')
			w.mu.Unlock()
			var entry struct {
				Msg          string `json:"msg"`
				Address      string `json:"address"`
				ProbeAddress string `json:"probeAddress"`
			}
			if json.Unmarshal(line, &entry) == nil && entry.Msg == "serving admission webhooks" {
				serving <- struct{ addr, probe string }{entry.Address, entry.ProbeAddress}
			}
		}
	}()
	go func() { _ = w.cmd.Wait(); close(w.exited) }()
	select {
	case s := <-serving:
		w.Address, w.Probe = s.addr, s.probe
	case <-w.exited:
		return nil, fmt.Errorf("qn-webhook exited before serving:\n%s", w.Logs())
	case <-time.After(30 * time.Second):
		w.Stop()
		return nil, fmt.Errorf("qn-webhook did not start serving within 30s:\n%s", w.Logs())
	}
	if w.CABundle, err = os.ReadFile(filepath.Join(certDir, "ca.crt")); err != nil {
		w.Stop()
		return nil, fmt.Errorf("read the self-signed CA bundle: %w", err)
	}
	return w, nil
}

// PID is the process id, for its memory in /proc.
func (w *WebhookProcess) PID() int { return w.cmd.Process.Pid }

// URL is the HTTPS URL of a webhook path.
func (w *WebhookProcess) URL(path string) string { return "https://" + w.Address + path }

// Logs returns everything the process printed so far.
func (w *WebhookProcess) Logs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.String()
}

// Stop sends SIGTERM and waits for a graceful exit.
func (w *WebhookProcess) Stop() error {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.exited
		return fmt.Errorf("qn-webhook did not exit within 30s of SIGTERM")
	}
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("qn-webhook exited with code %d:\n%s", code, w.Logs())
	}
	return nil
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Registration names a pair of webhook configurations pointing at one
// qn-webhook process.
type Registration struct {
	Name          string
	ValidateURL   string
	MutateURL     string
	CABundle      []byte
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// NamespaceSelector scopes the webhooks; kube-system is always excluded.
	NamespaceSelector *metav1.LabelSelector
}

// Register creates (or replaces) the Validating and Mutating
// WebhookConfigurations for QuantumNodes, with the fail-safe settings the
// chart uses: our resource only, sideEffects None, a bounded timeout.
func Register(ctx context.Context, kube kubernetes.Interface, r Registration) error {
	sideEffects := admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	equivalent := admissionregistrationv1.Equivalent
	reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
	failurePolicy := r.FailurePolicy
	ignore := admissionregistrationv1.Ignore
	selector := r.NamespaceSelector
	if selector == nil {
		selector = &metav1.LabelSelector{}
	}
	selector = selector.DeepCopy()
	selector.MatchExpressions = append(selector.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"},
	})
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{QuantumNodes.Group}, APIVersions: []string{QuantumNodes.Version}, Resources: []string{QuantumNodes.Resource},
		},
	}}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate." + r.Name + ".qn.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &r.ValidateURL, CABundle: r.CABundle},
			Rules:                   rules,
			FailurePolicy:           &failurePolicy,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       selector,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}, {
			// HorizontalQNScalers: their PromQL is parsed. Ignore on
			// failure, as the chart does: the CRD's own rules hold without
			// the webhook, and a scaler must stay pausable when it is down.
			Name:         "validate-scalers." + r.Name + ".qn.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &r.ValidateURL, CABundle: r.CABundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{Scalers.Group}, APIVersions: []string{Scalers.Version}, Resources: []string{Scalers.Resource},
				},
			}},
			FailurePolicy:           &ignore,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       selector,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mutate." + r.Name + ".qn.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &r.MutateURL, CABundle: r.CABundle},
			Rules:                   rules[:1:1],
			FailurePolicy:           &failurePolicy,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       selector,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &reinvoke,
		}},
	}
	// Mutating only on writes that carry an object.
	mutating.Webhooks[0].Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       rules[0].Rule,
	}}
	if err := upsert(ctx, kube.AdmissionregistrationV1().ValidatingWebhookConfigurations(), validating); err != nil {
		return err
	}
	return upsert(ctx, kube.AdmissionregistrationV1().MutatingWebhookConfigurations(), mutating)
}

// webhookConfig is what upsert needs of either configuration kind.
type webhookConfig interface {
	GetName() string
	GetResourceVersion() string
	SetResourceVersion(string)
}

// configAPI is the client of one configuration kind.
type configAPI[T webhookConfig] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// upsert creates cfg, or replaces the existing object of its name.
func upsert[T webhookConfig](ctx context.Context, api configAPI[T], cfg T) error {
	existing, err := api.Get(ctx, cfg.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, cfg, metav1.CreateOptions{})
		return err
	} else if err != nil {
		return err
	}
	cfg.SetResourceVersion(existing.GetResourceVersion())
	_, err = api.Update(ctx, cfg, metav1.UpdateOptions{})
	return err
}

// Eventually polls cond every 100ms until it returns nil or timeout passes;
// the last error explains the failure. Webhook configurations take a moment
// to become active: the suite waits for the effect, never a fixed sleep.
func Eventually(ctx context.Context, timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = cond(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Contains reports whether err's message contains every part.
func Contains(err error, parts ...string) bool {
	if err == nil {
		return false
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			return false
		}
	}
	return true
}

// WriteBundledPolicies copies the policies bundled in the binary into dir,
// the layout a user keeps in Git.
func WriteBundledPolicies(dir string) error {
	bundled := rego.Bundled()
	return fs.WalkDir(bundled, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, path)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(bundled, path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// Readiness returns the body of /readyz?verbose.
func (w *WebhookProcess) Readiness() (string, error) { return w.probe("/readyz?verbose") }

// Metrics returns the Prometheus exposition of /metrics.
func (w *WebhookProcess) Metrics() (string, error) { return w.probe("/metrics") }

func (w *WebhookProcess) probe(path string) (string, error) {
	resp, err := http.Get("http://" + w.Probe + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}
