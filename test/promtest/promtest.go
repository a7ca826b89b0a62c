// Package promtest runs a real Prometheus server for tests: the one
// hack/prometheus.sh builds from the Go module proxy, on a free loopback
// port, its TSDB in a temporary directory, scraping every second a small
// exporter whose series the test sets. Tests of the HorizontalQNScaler use
// it instead of a fake query API, so PromQL, staleness and the HTTP API's
// answers are Prometheus' own.
package promtest

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Version is the Prometheus release hack/prometheus.sh builds.
const Version = "v0.316.0"

// Binary finds the Prometheus server: $QN_PROMETHEUS (make test sets it),
// else hack/prometheus.sh's cache. Without it the test is skipped with a
// loud message, except in CI (CI=true), where a missing server is a
// failure: make test builds it.
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("QN_PROMETHEUS")
	if bin == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		bin = filepath.Join(cache, "qn-admission", "prometheus", Version, "prometheus")
	}
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	msg := fmt.Sprintf("no Prometheus server at %s, so the tests against a real Prometheus cannot run: "+
		"run ./hack/prometheus.sh (make test does) and export QN_PROMETHEUS=$(./hack/prometheus.sh)", bin)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED, NOT PASSED: " + msg)
	return ""
}

// Server is one Prometheus process.
type Server struct {
	// URL is the server's base URL.
	URL    string
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *syncBuffer
}

// Options of a server.
type Options struct {
	// Dir holds its configuration and TSDB.
	Dir string
	// Targets are the host:port pairs it scrapes every second.
	Targets []string
	// TLS, when set, makes it serve https with this certificate and key
	// (files), through Prometheus' own --web.config.file.
	TLSCertFile, TLSKeyFile string
	// Host is the address it listens on (default 127.0.0.1), e.g. a test
	// cluster's node address that its Pods reach; the port is a free one.
	Host string
}

// Start runs a Prometheus server and waits until it is ready; Stop ends
// it. bin is Binary's answer.
func Start(bin string, o Options) (*Server, error) {
	quoted := make([]string, len(o.Targets))
	for i, target := range o.Targets {
		quoted[i] = strconv.Quote(target)
	}
	config := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"+
		"scrape_configs:\n- job_name: exporter\n  static_configs:\n  - targets: [%s]\n", strings.Join(quoted, ", "))
	configFile := filepath.Join(o.Dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	addr, err := FreeAddress()
	if err != nil {
		return nil, err
	}
	if o.Host != "" {
		_, port, _ := net.SplitHostPort(addr)
		addr = net.JoinHostPort(o.Host, port)
	}
	scheme := "http"
	args := []string{
		"--config.file=" + configFile,
		"--storage.tsdb.path=" + filepath.Join(o.Dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}
	if o.TLSCertFile != "" {
		webConfig := filepath.Join(o.Dir, "web.yml")
		if err := os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: "+o.TLSCertFile+"\n  key_file: "+o.TLSKeyFile+"\n"), 0o600); err != nil {
			return nil, err
		}
		args, scheme = append(args, "--web.config.file="+webConfig), "https"
	}
	s := &Server{URL: scheme + "://" + addr, exited: make(chan struct{}), logs: &syncBuffer{}}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	// The readiness probe only waits; the test checks certificates itself.
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: insecure()}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("prometheus exited: %s", s.logs.String())
		default:
		}
		resp, err := probe.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("prometheus at %s not ready within 60s: %v\n%s", s.URL, err, s.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StartForTest runs a server stopped when the test ends.
func StartForTest(t testing.TB, targets ...string) *Server {
	t.Helper()
	s, err := Start(Binary(t), Options{Dir: t.TempDir(), Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 s). Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Pid is the server's process id, for CPU measurements.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Query runs an instant query and returns its one value, for tests that
// wait for a scrape (not the product's client).
func (s *Server) Query(query string) (float64, error) {
	resp, err := http.Get(s.URL + "/api/v1/query?" + url.Values{"query": {query}}.Encode())
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var answer struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return 0, err
	}
	if n := len(answer.Data.Result); n != 1 {
		return 0, fmt.Errorf("%s returned %d samples", query, n)
	}
	text, _ := answer.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(text, 64)
}

// WaitFor waits until query returns want (Prometheus scrapes every second).
func (s *Server) WaitFor(t testing.TB, query string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got float64
	var err error
	for time.Now().Before(deadline) {
		if got, err = s.Query(query); err == nil && got == want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s on %s did not become %v within 30s: last %v (%v)", query, s.URL, want, got, err)
}

// insecure lets the readiness probe reach a TLS server before the test
// checks its certificate the real way.
func insecure() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a readiness probe of the test's own server
}

// FreeAddress returns a loopback address with a port free right now.
func FreeAddress() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Exporter is the /metrics endpoint a test controls: gauges labelled by
// scenario, so tests sharing one Prometheus keep to their own series.
type Exporter struct {
	srv *httptest.Server
	reg *prometheus.Registry
	mu  sync.Mutex
	vec map[string]*prometheus.GaugeVec
}

// NewExporter serves an empty registry; Set adds series.
func NewExporter() *Exporter {
	e := &Exporter{reg: prometheus.NewRegistry(), vec: map[string]*prometheus.GaugeVec{}}
	e.srv = httptest.NewServer(promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}))
	return e
}

// Set sets the gauge name{scenario=...} to v.
func (e *Exporter) Set(name, scenario string, v float64) {
	e.mu.Lock()
	g, ok := e.vec[name]
	if !ok {
		g = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "A series a test sets."}, []string{"scenario"})
		e.reg.MustRegister(g)
		e.vec[name] = g
	}
	e.mu.Unlock()
	g.WithLabelValues(scenario).Set(v)
}

// Target is the exporter's host:port for a scrape configuration.
func (e *Exporter) Target() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// Close stops the exporter.
func (e *Exporter) Close() { e.srv.Close() }

// QueryProxy stands in front of a real Prometheus: it delays every answer
// (a slow Prometheus), may demand a bearer token and serve https (an
// authenticating gateway such as kube-rbac-proxy, since Prometheus itself
// checks no bearer tokens), and counts the instant queries it passes.
type QueryProxy struct {
	// URL is the proxy's base URL, to use as a server address.
	URL   string
	srv   *httptest.Server
	delay time.Duration
	mu    sync.Mutex
	count map[string]int
	// inFlight and maxInFlight count queries being answered at once.
	inFlight, maxInFlight int
	// refused counts requests refused for their token.
	refused int
	// held, while not nil, holds every query until it is closed.
	held chan struct{}
}

// ProxyOptions configure a QueryProxy.
type ProxyOptions struct {
	// Delay is added before every answer.
	Delay time.Duration
	// BearerToken, when set, is demanded as "Authorization: Bearer ...":
	// a request without it is answered 401 Unauthorized in plain text.
	BearerToken string
	// TLSCertFile and TLSKeyFile, when set, make the proxy serve https.
	TLSCertFile, TLSKeyFile string
}

// NewQueryProxy forwards to target after delay.
func NewQueryProxy(target string, delay time.Duration) (*QueryProxy, error) {
	return StartQueryProxy(target, ProxyOptions{Delay: delay})
}

// StartQueryProxy forwards to target as o says.
func StartQueryProxy(target string, o ProxyOptions) (*QueryProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &QueryProxy{delay: o.Delay, count: map[string]int{}}
	forward := httputil.NewSingleHostReverseProxy(u)
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.BearerToken != "" && r.Header.Get("Authorization") != "Bearer "+o.BearerToken {
			p.mu.Lock()
			p.refused++
			p.mu.Unlock()
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/api/v1/query" {
			p.mu.Lock()
			p.count[r.URL.Query().Get("query")]++
			p.inFlight++
			p.maxInFlight = max(p.maxInFlight, p.inFlight)
			held := p.held
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				p.inFlight--
				p.mu.Unlock()
			}()
			if held != nil {
				select {
				case <-held:
				case <-r.Context().Done():
					return
				}
			}
		}
		time.Sleep(p.delay)
		forward.ServeHTTP(w, r)
	}))
	if o.TLSCertFile == "" {
		p.srv.Start()
	} else {
		cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			p.srv.Close()
			return nil, fmt.Errorf("load the proxy's certificate: %w", err)
		}
		p.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		p.srv.StartTLS()
	}
	p.URL = p.srv.URL
	return p, nil
}

// Refused returns how many requests were refused for their token.
func (p *QueryProxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// Queries returns how many times query was asked.
func (p *QueryProxy) Queries(query string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[query]
}

// Total returns how many instant queries passed.
func (p *QueryProxy) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.count {
		n += c
	}
	return n
}

// MostInFlight returns the most queries that were answered at once.
func (p *QueryProxy) MostInFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxInFlight
}

// InFlight returns the queries being answered (or held) now.
func (p *QueryProxy) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inFlight
}

// Hold makes every query wait, unanswered, until Release: a Prometheus
// that has stopped answering but keeps its connections open.
func (p *QueryProxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Release answers the held queries and stops holding new ones.
func (p *QueryProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// Close stops the proxy, answering held queries first.
func (p *QueryProxy) Close() {
	p.Release()
	p.srv.Close()
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
