package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// serveTLS runs an HTTPS server on 127.0.0.1 with cfg, the way the webhook
// serves (ServeTLS with no certificate files, so GetCertificate is used),
// and returns its address. It answers "ok" to everything.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		TLSConfig:         cfg,
		ReadHeaderTimeout: 5 * time.Second,
		// Refused handshakes are the point of some tests; keep them quiet.
		ErrorLog:  log.New(io.Discard, "", 0),
		Protocols: new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS: %v", err)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// httpsClient trusts roots, verifies serverName (the dialled host when
// empty), presents cert if not nil, and makes a new connection, and so a new
// handshake, for every request.
func httpsClient(roots *x509.CertPool, serverName string, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName}
	if cert != nil {
		// Present it even when the server asks for another CA: Go's client
		// would otherwise silently send nothing.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   cfg,
			DisableKeepAlives: true,
		},
	}
}

// get makes one request and returns the serial of the certificate the
// server presented.
func get(c *http.Client, addr string) (*big.Int, error) {
	resp, err := c.Get("https://" + addr + "/")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return nil, errors.New("unexpected response " + resp.Status + ": " + string(body))
	}
	return resp.TLS.PeerCertificates[0].SerialNumber, nil
}

func TestServerTLSConfig(t *testing.T) {
	src := NewFileSource("unused.crt", "unused.key")
	cfg, err := ServerTLSConfig(src, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion = %x, want TLS 1.2", cfg.MinVersion)
	}
	if !slices.Contains(cfg.NextProtos, "http/1.1") {
		t.Errorf("NextProtos = %v, want http/1.1 among them", cfg.NextProtos)
	}
	if cfg.GetCertificate == nil || len(cfg.Certificates) != 0 {
		t.Error("the config must take its certificate from the source on every handshake, and only from there")
	}
	if cfg.ClientAuth != tls.NoClientCert {
		t.Errorf("ClientAuth without a client CA = %v, want NoClientCert", cfg.ClientAuth)
	}
}

func TestServerTLSConfigRejectsABadClientCAFile(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	writeFile(t, garbage, []byte("not a certificate"))
	tests := map[string]struct {
		source CertificateGetter
		file   string
		want   string
	}{
		"no source is an error": {
			source: nil, file: "", want: "no certificate source",
		},
		"a missing client CA file is named": {
			source: NewFileSource("a", "b"), file: filepath.Join(dir, "missing.pem"), want: filepath.Join(dir, "missing.pem"),
		},
		"a client CA file without certificates is named": {
			source: NewFileSource("a", "b"), file: garbage, want: garbage + " holds no PEM certificate",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ServerTLSConfig(tc.source, tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ServerTLSConfig error = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestHandshakeVerifiesSANsAndSurvivesRotation(t *testing.T) {
	ca := newTestCA(t, "serving CA")
	first := ca.serving(t)
	_, certFile, keyFile := writePairInTempDir(t, first)
	src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)), WithPollInterval(fastPoll))
	startSource(t, src)
	cfg, err := ServerTLSConfig(src, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg)

	sans := map[string]struct {
		serverName string
		want       string // empty: the request succeeds
	}{
		"a client dialling 127.0.0.1 verifies the IP SAN":       {serverName: ""},
		"a client asking for localhost verifies the DNS SAN":    {serverName: "localhost"},
		"a client asking for a name not in the SANs is refused": {serverName: "webhook.example.com", want: "not webhook.example.com"},
	}
	for name, tc := range sans {
		t.Run(name, func(t *testing.T) {
			serial, err := get(httpsClient(ca.pool(), tc.serverName, nil), addr)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("request failed: %v", err)
			case tc.want == "" && !sameSerial(serial, first.serial):
				t.Errorf("served serial = %v, want %v", serial, first.serial)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("request error = %v, want one saying %q", err, tc.want)
			}
		})
	}

	// Requests run back to back while the pair is rewritten in place three
	// times, the slowest kind of rotation: each rewrite has a moment where
	// the new certificate sits beside the old key. None may fail.
	client := httpsClient(ca.pool(), "localhost", nil)
	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		requests atomic.Int64
		mu       sync.Mutex
		failures []error
		seen     = map[string]bool{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20000 { // bounded, in case the test fails before stop
			select {
			case <-stop:
				return
			default:
			}
			serial, err := get(client, addr)
			requests.Add(1)
			mu.Lock()
			if err != nil {
				failures = append(failures, err)
			} else {
				seen[serial.String()] = true
			}
			mu.Unlock()
		}
	}()
	want := []*big.Int{first.serial}
	for range 3 {
		// Let the loop run a while on each pair, so rotations land among
		// requests rather than between two of them.
		before := requests.Load()
		waitFor(t, "requests on the current certificate", func() bool { return requests.Load() >= before+20 })
		next := ca.serving(t)
		want = append(want, next.serial)
		writeFile(t, certFile, next.certPEM)
		writeFile(t, keyFile, next.keyPEM)
		waitFor(t, "the request loop to be served the rotated certificate", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return seen[next.serial.String()]
		})
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed during rotation; first: %v", len(failures), requests.Load(), failures[0])
	}
	for _, s := range want {
		if !seen[s.String()] {
			t.Errorf("certificate %v was never served", s)
		}
	}
	t.Logf("%d requests across 3 rotations", requests.Load())
}

func TestHandshakeRefusesOldTLSVersions(t *testing.T) {
	ca := newTestCA(t, "serving CA")
	p := ca.serving(t)
	_, certFile, keyFile := writePairInTempDir(t, p)
	src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)))
	startSource(t, src)
	cfg, err := ServerTLSConfig(src, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg)

	tests := map[string]struct {
		min, max uint16
		refused  bool
	}{
		"a TLS 1.0 client is refused": {min: tls.VersionTLS10, max: tls.VersionTLS10, refused: true},
		"a TLS 1.1 client is refused": {min: tls.VersionTLS10, max: tls.VersionTLS11, refused: true},
		"a TLS 1.2 client is served":  {min: tls.VersionTLS12, max: tls.VersionTLS12},
		"a TLS 1.3 client is served":  {min: tls.VersionTLS13, max: tls.VersionTLS13},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool(), MinVersion: tc.min, MaxVersion: tc.max})
			if err == nil {
				defer conn.Close()
			}
			switch {
			case tc.refused && err == nil:
				t.Errorf("handshake succeeded with version %x", conn.ConnectionState().Version)
			case tc.refused && !strings.Contains(err.Error(), "protocol version"):
				t.Errorf("handshake error = %v, want a protocol version refusal", err)
			case !tc.refused && err != nil:
				t.Errorf("handshake failed: %v", err)
			}
		})
	}
}

func TestHandshakeChecksClientCertificates(t *testing.T) {
	servingCA := newTestCA(t, "serving CA")
	clientCA := newTestCA(t, "client CA")
	strangerCA := newTestCA(t, "another CA")
	p := servingCA.serving(t)
	dir, certFile, keyFile := writePairInTempDir(t, p)
	clientCAFile := filepath.Join(dir, "client-ca.crt")
	writeFile(t, clientCAFile, clientCA.certPEM)

	src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)))
	startSource(t, src)
	cfg, err := ServerTLSConfig(src, clientCAFile)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("ClientAuth = %v, want RequireAndVerifyClientCert", cfg.ClientAuth)
	}
	addr := serveTLS(t, cfg)

	tests := map[string]struct {
		cert *tls.Certificate
		want string // empty: served
	}{
		"a client without a certificate is refused":                 {want: "certificate required"},
		"a client whose certificate another CA signed is refused":   {cert: strangerCA.client(t), want: "unknown certificate authority"},
		"a client whose certificate the client CA signed is served": {cert: clientCA.client(t)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := get(httpsClient(servingCA.pool(), "localhost", tc.cert), addr)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("request failed: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("request error = %v, want one saying %q", err, tc.want)
			}
		})
	}
}
