package app

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/spf13/pflag"
	admissionv1 "k8s.io/api/admission/v1"
)

// options parses args with qn-webhook's own flag set, as main does.
func options(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("qn-webhook", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

// localArgs serve on free ports with a self-signed pair in dir.
func localArgs(dir string) []string {
	return []string{
		"--listen-address=127.0.0.1:0", "--probe-address=127.0.0.1:0",
		"--tls-self-signed", "--tls-self-signed-dir=" + filepath.Join(dir, "certs"), "--tls-self-signed-hosts=127.0.0.1",
		"--decision-log=" + filepath.Join(dir, "decisions.jsonl"),
	}
}

// started is a Program serving in the background.
type started struct {
	*Program
	cancel context.CancelFunc
	done   chan error
	logs   *harness.Output
	client *http.Client
}

func start(t *testing.T, dir string, args ...string) *started {
	t.Helper()
	logs := &harness.Output{}
	o := options(t, append(localArgs(dir), args...)...)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Build(ctx, o, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &started{Program: p, cancel: cancel, done: make(chan error, 1), logs: logs, client: httpsClient(t, filepath.Join(dir, "certs", "ca.crt"))}
	go func() { s.done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

func httpsClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// review is an AdmissionReview for a QuantumNode CREATE with spec.
func review(uid, spec string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
		"uid":%q,
		"kind":{"group":"qn.dev","version":"v1alpha1","kind":"QuantumNode"},
		"resource":{"group":"qn.dev","version":"v1alpha1","resource":"quantumnodes"},
		"namespace":"edge","name":"edge-1","operation":"CREATE",
		"userInfo":{"username":"alice","groups":["edge-ops"]},
		"object":{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"edge-1","namespace":"edge"},"spec":%s}}}`, uid, spec)
}

const (
	validSpec  = `{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883}]}`
	noArchSpec = `{"services":[{"name":"mqtt","port":8883}]}`
)

func (s *started) admit(t *testing.T, path string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	resp, err := s.client.Post("https://"+s.AdmissionListener.Addr().String()+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return decodeAnswer(t, resp)
}

func decodeAnswer(t *testing.T, resp *http.Response) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := io.ReadAll(resp.Body)
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(raw, &rev); err != nil || rev.Response == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d, want 200 and an AdmissionReview: %s (%v)", resp.StatusCode, raw, err)
	}
	return rev.Response
}

func (s *started) probe(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.ProbeListener.Addr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func waitForLog(t *testing.T, logs *harness.Output, msg string) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, "a "+msg+" log line", func() error {
		if !strings.Contains(logs.String(), `"msg":"`+msg+`"`) {
			return fmt.Errorf("none in the log:\n%s", logs.String())
		}
		return nil
	})
}

// The whole program, built from flags as main builds it, answers real
// AdmissionReviews over HTTPS, reports its probes, and on cancel stops
// being ready, finishes a request already in flight, and stops.
func TestProgramServesOverHTTPSThenDrains(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)

	if got := s.admit(t, "/validate", review("uid-allowed", validSpec)); !got.Allowed || got.UID != "uid-allowed" || got.Result.Code != 200 {
		t.Errorf("a valid QuantumNode: allowed=%v uid=%q code=%d, want admitted with its uid", got.Allowed, got.UID, got.Result.Code)
	}
	got := s.admit(t, "/validate", review("uid-denied", noArchSpec))
	if got.Allowed || got.Result.Code != 403 || !strings.Contains(got.Result.Message, "spec.hardware.arch is required") {
		t.Errorf("a QuantumNode without an architecture: allowed=%v code=%d message=%q, want 403 naming the field", got.Allowed, got.Result.Code, got.Result.Message)
	}
	if got := s.admit(t, "/mutate", review("uid-mutate", validSpec)); !got.Allowed || !strings.Contains(string(got.Patch), "qn.dev/managed-by") {
		t.Errorf("mutation adds the managed-by label: allowed=%v patch=%s", got.Allowed, got.Patch)
	}

	probes := map[string]struct {
		path string
		code int
		want []string
	}{
		"the process answers": {"/healthz", 200, []string{"ok"}},
		"ready says ok":       {"/readyz", 200, []string{"ok"}},
		"verbose readiness lists every check in order": {"/readyz?verbose", 200, []string{"[+]policies ok: serving bundled policies sha256:", "[+]certificate ok: serving, expires 20", "\n[+]shutdown ok\nok"}},
		"metrics count the answers": {"/metrics", 200, []string{`qn_admission_requests_total{code="403",decision="denied",role="default",webhook="validate"} 1`, "qn_admission_policy_revision_info",
			// One admitted change of 600 in alice's window: the 0.1 bucket.
			`qn_admission_window_usage_ratio_bucket{role="default",le="0.1"} 1`}},
	}
	for name, p := range probes {
		code, body := s.probe(t, p.path)
		for _, want := range p.want {
			if code != p.code || !strings.Contains(body, want) {
				t.Errorf("%s: GET %s = %d %q, want %d containing %q", name, p.path, code, body, p.code, want)
			}
		}
	}

	// A request in flight when the context ends: headers and half the
	// body sent, the rest only after the drain has begun.
	body := review("uid-in-flight", validSpec)
	conn, err := tls.Dial("tcp", s.AdmissionListener.Addr().String(), s.client.Transport.(*http.Transport).TLSClientConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	half := len(body) / 2
	if _, err := conn.Write(body[:half]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the server take the request up
	s.cancel()
	waitForLog(t, s.logs, "shutting down: draining in-flight admission requests")
	if code, body := s.probe(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]shutdown failed: draining in-flight requests") {
		t.Errorf("while draining, /readyz = %d %q, want 503 naming the drain", code, body)
	}
	if _, err := conn.Write(body[half:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the request in flight got no answer: %v", err)
	}
	if got := decodeAnswer(t, resp); !got.Allowed || got.UID != "uid-in-flight" {
		t.Errorf("the request in flight: allowed=%v uid=%q, want admitted with its uid", got.Allowed, got.UID)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("Serve after a drain: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	s.done <- nil // for the cleanup
	waitForLog(t, s.logs, "stopped")
	if c, err := net.DialTimeout("tcp", s.AdmissionListener.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the admission port still accepts connections after Serve returned")
	}

	decisions, err := os.ReadFile(filepath.Join(dir, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"uid-allowed", "uid-denied", "uid-mutate", "uid-in-flight"} {
		if !strings.Contains(string(decisions), `"uid":"`+uid+`"`) {
			t.Errorf("no decision line for %s in --decision-log:\n%s", uid, decisions)
		}
	}
}

// With --policy-dir the directory is the source: readiness names its
// revision (a content hash, not the bundled set).
func TestProgramServesAPolicyDirectory(t *testing.T) {
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policies")
	if err := os.CopyFS(policyDir, os.DirFS(filepath.Join("..", "..", "..", "rego", "bundle"))); err != nil {
		t.Fatal(err)
	}
	s := start(t, dir, "--policy-dir="+policyDir)
	if got := s.admit(t, "/validate", review("uid-dir", noArchSpec)); got.Allowed || got.Result.Code != 403 {
		t.Errorf("the directory's rules judge: allowed=%v code=%d, want 403", got.Allowed, got.Result.Code)
	}
	code, body := s.probe(t, "/readyz?verbose")
	if code != 200 || !strings.Contains(body, "[+]policies ok: serving sha256:") {
		t.Errorf("/readyz?verbose = %d %q, want the directory's revision", code, body)
	}
	if !strings.Contains(s.logs.String(), `"source":"`+policyDir+`"`) {
		t.Errorf("the policies loaded line names the directory:\n%s", s.logs.String())
	}
}

// What would keep the program from serving correctly is an error from
// Build, before any port is held.
func TestBuildRefuses(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := map[string]struct {
		args []string
		want string
	}{
		"a policy directory without roles.yaml":       {[]string{"--policy-dir=" + t.TempDir()}, "roles.yaml: missing"},
		"a policy directory that does not exist":      {[]string{"--policy-dir=" + filepath.Join(t.TempDir(), "nope")}, "--policy-dir: policy directory "},
		"a decision log that cannot be written":       {[]string{"--decision-log=" + filepath.Join(t.TempDir(), "missing", "d.jsonl")}, "--decision-log"},
		"a probe address another process holds":       {[]string{"--probe-address=" + busy.Addr().String()}, "listen for probes on " + busy.Addr().String()},
		"a certificate flag beside --tls-self-signed": {[]string{"--tls-cert-file=/tls/tls.crt"}, "exclude each other"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o := options(t, append(localArgs(t.TempDir()), c.args...)...)
			p, err := Build(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				p.close()
				t.Fatalf("Build succeeded, want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Build: %v, want it to contain %q", err, c.want)
			}
		})
	}
}
