package load

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/quantumnode/qn-admission/certs"
	"github.com/quantumnode/qn-admission/test/harness"
)

// Server is a running target process: what the load generator aims at,
// and the process that serves it.
type Server struct {
	*Target
	proc *harness.Process
	// helpers are processes the server needs (its redis-server), stopped
	// after it.
	helpers []*harness.Process
	// probe is the URL of qn-webhook's probe listener (/metrics,
	// /readyz), "" for other servers.
	probe string
	// ShadowRevision is the revision of the candidate set a shadowed
	// qn-webhook judges with beside the served one ("" without a shadow).
	ShadowRevision string
}

// Shadowed says the server judges every request again with a candidate
// policy set (qn-webhook --shadow-policy-dir).
func (s *Server) Shadowed() bool { return s.ShadowRevision != "" }

// Stop sends SIGTERM and waits for the process, then its helpers, to exit
// (killing each after 20 seconds).
func (s *Server) Stop() error {
	err := s.proc.Stop()
	for _, h := range s.helpers {
		if herr := h.Stop(); err == nil {
			err = herr
		}
	}
	return err
}

// Logs is the tail of what the process printed.
func (s *Server) Logs() string { return s.proc.Logs() }

// LogField returns field key of the first JSON log line whose msg is msg,
// or "" if the process printed none.
func (s *Server) LogField(msg, key string) string { return s.proc.LogField(msg, key) }

// serverProcess are the process options of every target: the last 64 KiB
// of its output kept, 20 seconds to stop.
var serverProcess = harness.ProcessOptions{KeepLast: 64 << 10, StopGrace: 20 * time.Second}

const opaModule = "github.com/open-policy-agent/opa"

// OPAVersion is the OPA module version go.mod pins.
func OPAVersion(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", opaModule)
	cmd.Dir = harness.ModuleRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %v", opaModule, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// CacheDir is where built tools are kept between runs, outside the tree:
// $QN_CACHE_DIR, else $XDG_CACHE_HOME/qn-admission, else
// ~/.cache/qn-admission (the directory hack/k8s-bins.sh uses).
func CacheDir() string {
	if d := os.Getenv("QN_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "qn-admission")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "qn-admission")
}

// CachedOPA is the path of the opa binary for version, and whether it is
// already built.
func CachedOPA(version string) (string, bool) {
	bin := filepath.Join(CacheDir(), "opa", version, "opa")
	info, err := os.Stat(bin)
	return bin, err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0
}

// EnsureOPA builds the opa command from the OPA module go.mod pins (the
// one qn-admission links), once per version, into the cache directory.
func EnsureOPA(ctx context.Context) (bin, version string, err error) {
	if version, err = OPAVersion(ctx); err != nil {
		return "", "", err
	}
	bin, ok := CachedOPA(version)
	if ok {
		return bin, version, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", "", err
	}
	// Build beside the target and rename, so an interrupted build never
	// leaves a half-written binary that looks cached.
	tmp := bin + ".tmp"
	if err := buildOPA(ctx, tmp, version); err != nil {
		return "", "", err
	}
	return bin, version, os.Rename(tmp, bin)
}

// buildOPA builds the opa command at version in a scratch module: this
// module's go.sum holds only the OPA packages qn-admission links, not
// those of OPA's own command, and must stay tidy.
func buildOPA(ctx context.Context, out, version string) error {
	dir, err := os.MkdirTemp("", "opa-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out, err = filepath.Abs(out)
	if err != nil {
		return err
	}
	for _, args := range [][]string{
		{"mod", "init", "opabuild"},
		{"get", opaModule + "@" + version},
		{"build", "-o", out, opaModule},
	} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build the opa command %s (go %s): %v\n%s", version, strings.Join(args, " "), err, b)
		}
	}
	return nil
}

// StartWebhook runs a qn-webhook binary with self-signed TLS in certDir on
// a free loopback port, its decision log to stdout as the chart runs it
// (this process reads it, as a container runtime would, and keeps its last
// 64 KiB), plus extra flags.
func StartWebhook(name, bin, certDir string, extra ...string) (*Server, error) {
	return StartWebhookWithEnv(name, bin, certDir, nil, extra...)
}

// StartWebhookWithEnv is StartWebhook with extra environment variables
// (e.g. GOGC=400), for comparing runtime settings.
func StartWebhookWithEnv(name, bin, certDir string, env []string, extra ...string) (*Server, error) {
	opts := serverProcess
	opts.Env = env
	w, err := harness.StartWebhook(bin, certDir, harness.WebhookOptions{
		Args:    append([]string{"--decision-log", "-"}, extra...),
		Process: opts,
	})
	if err != nil {
		return nil, err
	}
	return &Server{Target: &Target{
		Name: name, BaseURL: "https://" + w.Address, ValidatePath: "/validate", MutatePath: "/mutate",
		RootCAs: w.RootCAs, PID: w.PID(), Judges: true,
	}, proc: w.Process, probe: w.ProbeURL("")}, nil
}

// StartWebhookWithRedis is StartWebhookWithEnv with rate windows in a
// redis-server of its own (started here, persistence off, as the chart's
// bundled one), whose CPU time counts in the target's: the shared window as
// a user pays for it.
func StartWebhookWithRedis(name, bin, certDir string, env []string, extra ...string) (*Server, error) {
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%s needs redis-server, which is not on PATH: install it (Debian: apt-get install -y redis-server)", name)
	}
	addr, err := harness.FreeAddress()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	if err := os.MkdirAll(certDir+"-redis", 0o755); err != nil {
		return nil, err
	}
	redis, err := harness.Start(redisBin, []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", certDir + "-redis"}, serverProcess)
	if err != nil {
		return nil, err
	}
	if err := awaitRedis(addr, 15*time.Second); err != nil {
		_ = redis.Stop()
		return nil, fmt.Errorf("%s: %w:\n%s", name, err, redis.Logs())
	}
	s, err := StartWebhookWithEnv(name, bin, certDir, env, append([]string{"--window-store", "redis", "--redis-address", addr}, extra...)...)
	if err != nil {
		_ = redis.Stop()
		return nil, err
	}
	if strings.Contains(s.Logs(), "Redis does not answer yet") {
		_ = s.Stop()
		_ = redis.Stop()
		return nil, fmt.Errorf("%s: redis-server on %s did not answer at start:\n%s", name, addr, redis.Logs())
	}
	s.helpers = append(s.helpers, redis)
	s.HelperPIDs = append(s.HelperPIDs, redis.PID())
	return s, nil
}

// awaitRedis waits until the redis-server at addr answers PING: the
// webhook started before that would begin with its store unreachable.
func awaitRedis(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(time.Second))
			reply := make([]byte, 7)
			if _, err = conn.Write([]byte("PING\r\n")); err == nil {
				_, err = io.ReadFull(conn, reply)
			}
			conn.Close()
			if err == nil && string(reply) == "+PONG\r\n" {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("PING answered %q", reply)
			}
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer PING within %s: %v", addr, timeout, last)
}

// StartCeiling runs the bare-TLS ceiling server with a certificate in
// certDir, and extra flags.
func StartCeiling(bin, certDir string, extra ...string) (*Server, error) {
	p, serving, err := harness.StartServing(bin, append([]string{"--listen-address", "127.0.0.1:0", "--tls-dir", certDir}, extra...), serverProcess, 60*time.Second)
	if err != nil {
		return nil, err
	}
	_, pool, err := harness.ReadCA(filepath.Join(certDir, certs.CAFileName))
	if err != nil {
		_ = p.Stop()
		return nil, err
	}
	return &Server{Target: &Target{
		Name: "bare TLS ceiling", BaseURL: "https://" + serving.Address, ValidatePath: "/validate", MutatePath: "/mutate",
		RootCAs: pool, PID: p.PID(),
	}, proc: p}, nil
}

// OPADir is test/load/opa: the OPA configuration and the QuantumNode
// policy written as OPA's Kubernetes admission tutorial does.
func OPADir() string { return filepath.Join(harness.ModuleRoot(), "test", "load", "opa") }

// OPAMutatePath is the decision the mutating webhook asks OPA for, through
// the v0 data API (input is the raw body, the answer the raw document):
// OPA serves one default decision, and it answers the validating webhook.
const OPAMutatePath = "/v0/data/system/mutate"

// StartOPA runs `opa run --server` over TLS with the configuration and
// policy in OPADir, as users deploy it for admission control: the default
// decision system/main answers POST / with an AdmissionReview.
func StartOPA(bin, certDir string) (*Server, error) {
	return StartOPAWithEnv(NameOPA, bin, certDir, nil)
}

// StartOPAWithEnv is StartOPA with extra environment variables (the Go
// runtime settings qn-webhook is measured with), named name.
func StartOPAWithEnv(name, bin, certDir string, env []string) (*Server, error) {
	opts := serverProcess
	opts.Env = env
	bundle, err := certs.SelfSigned(certs.SelfSignedOptions{Dir: certDir, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return nil, err
	}
	addr, err := harness.FreeAddress()
	if err != nil {
		return nil, err
	}
	dir := OPADir()
	p, err := harness.Start(bin, []string{
		"run", "--server", "--addr", addr,
		"--tls-cert-file", bundle.CertFile, "--tls-private-key-file", bundle.KeyFile,
		"--config-file", filepath.Join(dir, "config.yaml"),
		"--disable-telemetry", "--log-level", "error",
		filepath.Join(dir, "policy"),
	}, opts)
	if err != nil {
		return nil, err
	}
	_, pool, err := harness.ReadCA(bundle.CAFile)
	if err != nil {
		_ = p.Stop()
		return nil, err
	}
	// opa says it listens before it is ready; /health answers 200 once the
	// policy is activated.
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("https://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-p.Exited():
			return nil, fmt.Errorf("opa exited before serving:\n%s", p.Logs())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.Stop()
			return nil, fmt.Errorf("opa not healthy within 30s (last: %v):\n%s", err, p.Logs())
		}
	}
	return &Server{Target: &Target{
		Name: name, BaseURL: "https://" + addr, ValidatePath: "/", MutatePath: OPAMutatePath,
		RootCAs: pool, PID: p.PID(), Judges: true,
	}, proc: p}, nil
}

// WriteExtraPolicies writes the bundled policies into dir plus n roles,
// each with its own policy package that no fixture's role uses: the cost of
// a decision must not grow with other roles' policies.
func WriteExtraPolicies(dir string, n int) error {
	if err := harness.WriteBundledPolicies(dir); err != nil {
		return err
	}
	rolesFile := filepath.Join(dir, "roles.yaml")
	roles, err := os.ReadFile(rolesFile)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.Write(roles)
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	if err := os.MkdirAll(filepath.Join(dir, "extra"), 0o755); err != nil {
		return err
	}
	for i := range n {
		fmt.Fprintf(&b, "  extra%d:\n    operations: [CREATE, UPDATE]\n    packages: [qn.extra.p%d]\n", i, i)
		src := fmt.Sprintf("package qn.extra.p%d\n\ndeny contains \"extra policy %d: team t%d may run at most %d services\" if {\n\tinput.request.object.metadata.labels.team == \"t%d\"\n\tcount(input.request.object.spec.services) > %d\n}\n", i, i, i, i%7+1, i, i%7+1)
		if err := os.WriteFile(filepath.Join(dir, "extra", fmt.Sprintf("p%d.rego", i)), []byte(src), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(rolesFile, []byte(b.String()), 0o644)
}
