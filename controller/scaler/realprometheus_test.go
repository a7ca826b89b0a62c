package scaler

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// prometheusBinary finds the Prometheus server hack/prometheus.sh builds:
// $QN_PROMETHEUS (make test sets it), else the script's cache. Without it
// the test is skipped with a loud message, except in CI (CI=true), where a
// missing server is a failure: make test builds it.
func prometheusBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("QN_PROMETHEUS")
	if bin == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		bin = filepath.Join(cache, "qn-admission", "prometheus", "v0.316.0", "prometheus")
	}
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	msg := fmt.Sprintf("no Prometheus server at %s, so the scaler tests against a real Prometheus cannot run: "+
		"run ./hack/prometheus.sh (make test does) and export QN_PROMETHEUS=$(./hack/prometheus.sh)", bin)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED, NOT PASSED: " + msg)
	return ""
}

// promProcess is one Prometheus server scraping the given targets every
// second, on a free loopback port, its TSDB in a temporary directory.
type promProcess struct {
	// URL is the server's base URL.
	URL    string
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *syncBuffer
}

// startPrometheus starts a Prometheus server that scrapes targets
// (host:port) every second and waits until it is ready. extraConfig is
// appended to its command line (e.g. a --web.config.file for TLS).
func startPrometheus(t testing.TB, dir string, targets []string, scheme string, extra ...string) (*promProcess, error) {
	bin := prometheusBinary(t)
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = fmt.Sprintf("%q", target)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: exporter
  static_configs:
  - targets: [%s]
`, strings.Join(quoted, ", "))
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddress()
	if err != nil {
		return nil, err
	}
	p := &promProcess{URL: scheme + "://" + addr, exited: make(chan struct{}), logs: &syncBuffer{}}
	args := append([]string{
		"--config.file=" + configFile,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: insecureForReadiness()}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("prometheus exited: %s", p.logs.String())
		default:
		}
		resp, err := client.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("prometheus at %s not ready within 60s: %v\n%s", p.URL, err, p.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 s).
func (p *promProcess) Stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// freeAddress returns a loopback address with a port free right now.
func freeAddress() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// insecureForReadiness lets the readiness probe reach a TLS server before
// the test checks its certificate the real way.
func insecureForReadiness() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a readiness probe of the test's own server
}

// shared is one Prometheus scraping one exporter for the whole package.
var shared struct {
	once sync.Once
	err  error
	prom *promProcess
	exp  *exporter
	dir  string
}

// sharedPrometheus returns the package's Prometheus and its exporter,
// starting them on first use.
func sharedPrometheus(t testing.TB) (*promProcess, *exporter) {
	t.Helper()
	prometheusBinary(t)
	shared.once.Do(func() {
		shared.exp = newExporter()
		if shared.dir, shared.err = os.MkdirTemp("", "qn-scaler-prometheus-"); shared.err != nil {
			return
		}
		shared.prom, shared.err = startPrometheus(t, shared.dir, []string{shared.exp.target()}, "http")
	})
	if shared.err != nil {
		t.Fatalf("start the shared Prometheus: %v", shared.err)
	}
	return shared.prom, shared.exp
}

// stopShared ends what sharedPrometheus started (from TestMain).
func stopShared() {
	shared.prom.Stop()
	if shared.exp != nil {
		shared.exp.srv.Close()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

// exporter is the small /metrics endpoint the tests control: each scenario
// sets its own series, which Prometheus scrapes every second.
type exporter struct {
	srv        *httptest.Server
	queue      *prometheus.GaugeVec
	errorRatio *prometheus.GaugeVec
}

func newExporter() *exporter {
	reg := prometheus.NewRegistry()
	e := &exporter{
		queue:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qn_test_queue_depth", Help: "A queue a scenario sets."}, []string{"scenario"}),
		errorRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "qn_test_error_ratio", Help: "An error ratio a scenario sets."}, []string{"scenario"}),
	}
	reg.MustRegister(e.queue, e.errorRatio)
	e.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return e
}

// target is the exporter's host:port for a scrape config.
func (e *exporter) target() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// waitForValue waits until query returns want on the server.
func waitForValue(t testing.TB, p *Prometheus, server Server, query string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last Reading
	for time.Now().Before(deadline) {
		last = p.Query(context.Background(), server, query)
		if last.Err == nil && last.Value == want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s on %s did not become %v within 30s; last reading %+v", query, server.URL, want, last)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// queryProxy stands in front of a real Prometheus: it delays every answer
// (a slow Prometheus) and counts the instant queries it passes, by query.
type queryProxy struct {
	srv   *httptest.Server
	delay time.Duration
	mu    sync.Mutex
	count map[string]int
	// inFlight and maxInFlight count queries being answered at once.
	inFlight, maxInFlight int
}

func newQueryProxy(target string, delay time.Duration) *queryProxy {
	u, err := url.Parse(target)
	if err != nil {
		panic(err)
	}
	p := &queryProxy{delay: delay, count: map[string]int{}}
	forward := httputil.NewSingleHostReverseProxy(u)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/query" {
			p.mu.Lock()
			p.count[r.URL.Query().Get("query")]++
			p.inFlight++
			p.maxInFlight = max(p.maxInFlight, p.inFlight)
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				p.inFlight--
				p.mu.Unlock()
			}()
		}
		time.Sleep(p.delay)
		forward.ServeHTTP(w, r)
	}))
	return p
}

// queries returns how many times query was asked.
func (p *queryProxy) queries(query string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[query]
}

// most returns the most queries that were answered at once.
func (p *queryProxy) most() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxInFlight
}
