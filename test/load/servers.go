package load

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quantumnode/qn-admission/certs"
	"github.com/quantumnode/qn-admission/test/e2e"
)

// ModuleRoot is the qn-admission checkout this package was built from.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Server is a running target process.
type Server struct {
	*Target
	proc *process
}

// Stop sends SIGTERM and waits for the process to exit (killing it after
// 20 seconds).
func (s *Server) Stop() error { return s.proc.stop() }

// Logs is the tail of what the process printed.
func (s *Server) Logs() string { return s.proc.logs() }

// LogField returns field key of the first JSON log line whose msg is msg,
// or "" if the process printed none.
func (s *Server) LogField(msg, key string) string {
	for line := range strings.SplitSeq(s.Logs(), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == msg {
			v, _ := entry[key].(string)
			return v
		}
	}
	return ""
}

// BuildWebhook compiles cmd/qn-webhook into dir.
func BuildWebhook(ctx context.Context, dir string) (string, error) {
	return e2e.BuildWebhook(ctx, dir)
}

// BuildCeiling compiles the bare-TLS ceiling server into dir.
func BuildCeiling(ctx context.Context, dir string) (string, error) {
	return goBuild(ctx, filepath.Join(dir, "ceiling"), "./test/load/cmd/ceiling")
}

// BuildProfilingWebhook compiles qn-webhook with a pprof listener
// (test/load/cmd/qnprof) into dir, for CPU profiles under load.
func BuildProfilingWebhook(ctx context.Context, dir string) (string, error) {
	return goBuild(ctx, filepath.Join(dir, "qnprof"), "./test/load/cmd/qnprof")
}

func goBuild(ctx context.Context, out, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", e2e.BuildTags, "-o", out, pkg)
	cmd.Dir = ModuleRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

const opaModule = "github.com/open-policy-agent/opa"

// OPAVersion is the OPA module version go.mod pins.
func OPAVersion(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", opaModule)
	cmd.Dir = ModuleRoot()
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
// a free loopback port, its decision log to /dev/null (the line is still
// built and written; a file keeps stdout quiet under load), plus extra
// flags.
func StartWebhook(name, bin, certDir string, extra ...string) (*Server, error) {
	return StartWebhookWithEnv(name, bin, certDir, nil, extra...)
}

// StartWebhookWithEnv is StartWebhook with extra environment variables
// (e.g. GOGC=400), for comparing runtime settings.
func StartWebhookWithEnv(name, bin, certDir string, env []string, extra ...string) (*Server, error) {
	args := append([]string{
		"--tls-self-signed", "--tls-self-signed-dir", certDir,
		"--listen-address", "127.0.0.1:0", "--probe-address", "127.0.0.1:0",
		"--log-format", "json", "--decision-log", os.DevNull,
	}, extra...)
	p, addr, err := startServing(bin, args, env)
	if err != nil {
		return nil, err
	}
	pool, err := caPool(filepath.Join(certDir, certs.CAFileName))
	if err != nil {
		p.stop()
		return nil, err
	}
	return &Server{Target: &Target{
		Name: name, BaseURL: "https://" + addr, ValidatePath: "/validate", MutatePath: "/mutate",
		RootCAs: pool, PID: p.cmd.Process.Pid, Judges: true,
	}, proc: p}, nil
}

// StartCeiling runs the bare-TLS ceiling server with a certificate in
// certDir.
func StartCeiling(bin, certDir string) (*Server, error) {
	p, addr, err := startServing(bin, []string{"--listen-address", "127.0.0.1:0", "--tls-dir", certDir}, nil)
	if err != nil {
		return nil, err
	}
	pool, err := caPool(filepath.Join(certDir, certs.CAFileName))
	if err != nil {
		p.stop()
		return nil, err
	}
	return &Server{Target: &Target{
		Name: "bare TLS ceiling", BaseURL: "https://" + addr, ValidatePath: "/validate", MutatePath: "/mutate",
		RootCAs: pool, PID: p.cmd.Process.Pid,
	}, proc: p}, nil
}

// OPADir is test/load/opa: the OPA configuration and the QuantumNode
// policy written as OPA's Kubernetes admission tutorial does.
func OPADir() string { return filepath.Join(ModuleRoot(), "test", "load", "opa") }

// OPAMutatePath is the decision the mutating webhook asks OPA for, through
// the v0 data API (input is the raw body, the answer the raw document):
// OPA serves one default decision, and it answers the validating webhook.
const OPAMutatePath = "/v0/data/system/mutate"

// StartOPA runs `opa run --server` over TLS with the configuration and
// policy in OPADir, as users deploy it for admission control: the default
// decision system/main answers POST / with an AdmissionReview.
func StartOPA(bin, certDir string) (*Server, error) {
	bundle, err := certs.SelfSigned(certs.SelfSignedOptions{Dir: certDir, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := OPADir()
	p, err := startProcess(bin, []string{
		"run", "--server", "--addr", addr,
		"--tls-cert-file", bundle.CertFile, "--tls-private-key-file", bundle.KeyFile,
		"--config-file", filepath.Join(dir, "config.yaml"),
		"--disable-telemetry", "--log-level", "error",
		filepath.Join(dir, "policy"),
	}, nil, nil)
	if err != nil {
		return nil, err
	}
	pool, err := caPool(bundle.CAFile)
	if err != nil {
		p.stop()
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
		case <-p.exited:
			return nil, fmt.Errorf("opa exited before serving:\n%s", p.logs())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("opa not healthy within 30s (last: %v):\n%s", err, p.logs())
		}
	}
	return &Server{Target: &Target{
		Name: "OPA", BaseURL: "https://" + addr, ValidatePath: "/", MutatePath: OPAMutatePath,
		RootCAs: pool, PID: p.cmd.Process.Pid, Judges: true,
	}, proc: p}, nil
}

// WriteExtraPolicies writes the bundled policies into dir plus n roles,
// each with its own policy package that no fixture's role uses: the cost of
// a decision must not grow with other roles' policies.
func WriteExtraPolicies(dir string, n int) error {
	if err := e2e.WriteBundledPolicies(dir); err != nil {
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

func caPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", file)
	}
	return pool, nil
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startServing starts bin and waits for its JSON log line
// {"msg":"serving admission webhooks","address":...} (qn-webhook's, which
// the ceiling copies).
func startServing(bin string, args, env []string) (*process, string, error) {
	serving := make(chan string, 1)
	p, err := startProcess(bin, args, env, func(line []byte) {
		var entry struct {
			Msg     string `json:"msg"`
			Address string `json:"address"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.Msg == "serving admission webhooks" {
			select {
			case serving <- entry.Address:
			default:
			}
		}
	})
	if err != nil {
		return nil, "", err
	}
	select {
	case addr := <-serving:
		return p, addr, nil
	case <-p.exited:
		return nil, "", fmt.Errorf("%s exited before serving:\n%s", filepath.Base(bin), p.logs())
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, "", fmt.Errorf("%s did not start serving within 60s:\n%s", filepath.Base(bin), p.logs())
	}
}

// process is a child process whose output is kept (the last 64 KiB).
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	tail   []byte
}

const logTail = 64 << 10

func startProcess(bin string, args, env []string, onLine func([]byte)) (*process, error) {
	p := &process{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			_, _ = p.Write(append(sc.Bytes(), '\n'))
			if onLine != nil {
				onLine(sc.Bytes())
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		<-scanned
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tail = append(p.tail, b...)
	if len(p.tail) > logTail {
		p.tail = append(p.tail[:0], p.tail[len(p.tail)-logTail:]...)
	}
	return len(b), nil
}

func (p *process) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.tail)
}

func (p *process) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not exit within 20s of SIGTERM", filepath.Base(p.cmd.Path))
	}
	return nil
}
