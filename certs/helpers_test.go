package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// waitTimeout bounds every wait for an asynchronous outcome. Waits return as
// soon as the outcome is seen, so this only matters when a test fails.
const waitTimeout = 10 * time.Second

// fastPoll is the poll interval of tests that rely on polling; tests that
// must prove the directory watch works use noPoll instead.
const (
	fastPoll = 20 * time.Millisecond
	noPoll   = time.Hour
)

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLogger keeps the test output quiet unless -v shows a failure's story.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// testCA is a CA whose key the test keeps, to issue as many serving and
// client certificates as a rotation scenario needs.
type testCA struct {
	*issuer
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	now := time.Now()
	ca, err := newCA(name, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return testCA{ca}
}

// pool returns a pool trusting only this CA.
func (ca testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// testPair is a PEM certificate and key and the certificate's serial.
type testPair struct {
	certPEM, keyPEM []byte
	serial          *big.Int
}

// serving issues a serving certificate for localhost and 127.0.0.1.
func (ca testCA) serving(t *testing.T) testPair {
	t.Helper()
	return ca.issuePair(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// client issues a client certificate such as kube-apiserver presents.
func (ca testCA) client(t *testing.T) *tls.Certificate {
	t.Helper()
	p := ca.issuePair(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	c, err := tls.X509KeyPair(p.certPEM, p.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func (ca testCA) issuePair(t *testing.T, tmpl *x509.Certificate) testPair {
	t.Helper()
	certPEM, keyPEM, err := ca.issue(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return testPair{certPEM: certPEM, keyPEM: keyPEM, serial: tmpl.SerialNumber}
}

// writeFile writes data in place, the way a person or a simple tool
// rewrites a file (not atomically).
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// secretVolume lays out a directory the way the kubelet mounts a Secret:
// tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>/, and an update writes
// a new timestamped directory and renames a ..data_tmp symlink over ..data,
// so both files change in one atomic step.
type secretVolume struct {
	dir     string
	current string
	n       int
}

func newSecretVolume(t *testing.T, p testPair) *secretVolume {
	t.Helper()
	v := &secretVolume{dir: t.TempDir()}
	v.update(t, p)
	for _, name := range []string{CertFileName, KeyFileName} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *secretVolume) update(t *testing.T, p testPair) {
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_01_02_15_04_05.%09d", v.n)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(v.dir, ts, CertFileName), p.certPEM)
	writeFile(t, filepath.Join(v.dir, ts, KeyFileName), p.keyPEM)
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if v.current != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.current)); err != nil {
			t.Fatal(err)
		}
	}
	v.current = ts
}

func (v *secretVolume) certFile() string { return filepath.Join(v.dir, CertFileName) }
func (v *secretVolume) keyFile() string  { return filepath.Join(v.dir, KeyFileName) }

// startSource starts src in the background and stops it when the test ends,
// failing the test if Start returned an error.
func startSource(t *testing.T, src *FileSource) {
	t.Helper()
	if err := src.Load(); err != nil {
		t.Fatalf("initial load: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
}

// servedSerial returns the serial of the certificate src hands to a
// handshake, or nil if it hands none.
func servedSerial(src *FileSource) *big.Int {
	c, err := src.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || c == nil || c.Leaf == nil {
		return nil
	}
	return c.Leaf.SerialNumber
}

func sameSerial(a, b *big.Int) bool { return a != nil && b != nil && a.Cmp(b) == 0 }

// writePairInTempDir writes p as tls.crt and tls.key into a new temporary
// directory, the layout of a mounted Secret, and returns the paths.
func writePairInTempDir(t *testing.T, p testPair) (dir, certFile, keyFile string) {
	t.Helper()
	dir = t.TempDir()
	certFile, keyFile = filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName)
	writeFile(t, certFile, p.certPEM)
	writeFile(t, keyFile, p.keyPEM)
	return dir, certFile, keyFile
}
