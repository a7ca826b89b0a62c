package webhook

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func selfSignedTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, roots
}

// A caller's kept-alive connection outlives the stop signal by a request:
// the API server sends on the connection it holds, and a server that
// closed it at once would fail that POST with EOF (not retried, so a
// failed write). Once told to stop, the server answers with Connection:
// close and closes the connection after that answer.
func TestStoppingServerEndsKeptAliveConnectionsWithAnAnswer(t *testing.T) {
	tlsConfig, roots := selfSignedTLS(t)
	admissionLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	probeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{
		Handler:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "judged") }),
		TLSConfig:   tlsConfig,
		GracePeriod: 4 * time.Second,
		Registry:    prometheus.NewRegistry(),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, admissionLn, probeLn) }()

	conn, err := tls.Dial("tcp", admissionLn.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reader := bufio.NewReader(conn)
	ask := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1/validate", nil)
		if err := req.Write(conn); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(reader, req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	if resp, err := ask(); err != nil || resp.Close {
		t.Fatalf("before the stop: %v (close %v)", err, resp != nil && resp.Close)
	}
	stop()
	// The connection is idle when the stop comes; the caller sends on it
	// a moment later, as a pooled connection is reused.
	time.Sleep(200 * time.Millisecond)
	stopped := time.Now()
	resp, err := ask()
	if err != nil {
		t.Fatalf("a request on a kept-alive connection just after the stop failed: %v", err)
	}
	if !resp.Close {
		t.Errorf("the answer after the stop does not say Connection: close")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(stopped); waited > time.Second {
			t.Errorf("the server waited %s after its last connection closed", waited)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not stop")
	}
}
