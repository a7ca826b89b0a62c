package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"
)

// File names SelfSigned writes, the same names a kubernetes.io/tls Secret
// (and so cert-manager) uses, so the same flags work for both.
const (
	CAFileName   = "ca.crt"
	CertFileName = "tls.crt"
	KeyFileName  = "tls.key"
)

const (
	// defaultCAValidity is how long a self-signed CA is valid.
	defaultCAValidity = 365 * 24 * time.Hour
	// defaultServingValidity is how long a self-signed serving certificate
	// is valid; it never outlives its CA.
	defaultServingValidity = 90 * 24 * time.Hour

	// backdate moves NotBefore into the past so a cluster whose clock runs a
	// little behind this machine's (a kind node, a VM) still accepts a
	// certificate made a moment ago.
	backdate = time.Hour
)

// SelfSignedOptions says what SelfSigned creates and where.
type SelfSignedOptions struct {
	// Dir receives ca.crt, tls.crt and tls.key. It is created (0700) if
	// missing.
	Dir string
	// DNSNames and IPAddresses are the serving certificate's SANs, the
	// names clients dial (e.g. localhost, 127.0.0.1, ::1, or the address
	// kube-apiserver uses to reach a webhook running on this machine). At
	// least one is required.
	DNSNames    []string
	IPAddresses []net.IP
	// CAValidity and ServingValidity default to defaultCAValidity and
	// defaultServingValidity.
	CAValidity      time.Duration
	ServingValidity time.Duration
	// Clock defaults to the real clock; tests move it.
	Clock clock.PassiveClock
}

// SelfSignedBundle is what SelfSigned wrote: paths to serve through a
// FileSource, and the CA a webhook configuration must trust.
type SelfSignedBundle struct {
	CAFile   string
	CertFile string
	KeyFile  string
	// CAPEM is the CA certificate, the caBundle of a webhook configuration.
	CAPEM []byte
	// Reused is true when Dir already held a valid bundle for the same
	// names, which was kept instead of made anew.
	Reused bool
}

// SelfSigned makes a CA and a serving certificate signed by it for local
// runs, and writes them to opts.Dir for a FileSource to serve.
//
// If Dir already holds a bundle that covers the requested names and has more
// than a third of its serving lifetime left, it is kept: restarting a local
// server then does not invalidate the caBundle someone registered with their
// cluster. Delete the directory to force a new CA.
func SelfSigned(opts SelfSignedOptions) (*SelfSignedBundle, error) {
	if opts.Dir == "" {
		return nil, errors.New("self-signed certificate: no directory given")
	}
	if len(opts.DNSNames) == 0 && len(opts.IPAddresses) == 0 {
		return nil, errors.New("self-signed certificate: no DNS names or IP addresses given; clients could not verify it")
	}
	if opts.CAValidity <= 0 {
		opts.CAValidity = defaultCAValidity
	}
	if opts.ServingValidity <= 0 {
		opts.ServingValidity = defaultServingValidity
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	b := &SelfSignedBundle{
		CAFile:   filepath.Join(opts.Dir, CAFileName),
		CertFile: filepath.Join(opts.Dir, CertFileName),
		KeyFile:  filepath.Join(opts.Dir, KeyFileName),
	}
	if caPEM, ok := reusableBundle(b, opts); ok {
		b.CAPEM, b.Reused = caPEM, true
		return b, nil
	}

	now := opts.Clock.Now()
	ca, err := newCA("qn-admission self-signed CA", now.Add(-backdate), now.Add(opts.CAValidity))
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	cn := "qn-admission"
	if len(opts.DNSNames) > 0 {
		cn = opts.DNSNames[0]
	}
	notAfter := now.Add(opts.ServingValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	certPEM, keyPEM, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    opts.DNSNames,
		IPAddresses: opts.IPAddresses,
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		// ECDSA keys sign the handshake; they never encipher a key, so
		// DigitalSignature is the whole of it.
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}

	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("self-signed certificate: create directory %s: %w", opts.Dir, err)
	}
	for _, f := range []struct {
		path string
		data []byte
		perm os.FileMode
	}{
		{b.KeyFile, keyPEM, 0o600},
		{b.CAFile, ca.certPEM, 0o644},
		{b.CertFile, certPEM, 0o644},
	} {
		if err := writeFileAtomic(f.path, f.data, f.perm); err != nil {
			return nil, fmt.Errorf("self-signed certificate: %w", err)
		}
	}
	b.CAPEM = ca.certPEM
	return b, nil
}

// WriteCABundle writes the CA certificate PEM to path (0644), for the
// caBundle of a ValidatingWebhookConfiguration or
// MutatingWebhookConfiguration (base64 of these bytes) pointed at a server
// running with a self-signed certificate.
func (b *SelfSignedBundle) WriteCABundle(path string) error {
	if len(b.CAPEM) == 0 {
		return errors.New("write CA bundle: the bundle holds no CA certificate")
	}
	if err := writeFileAtomic(path, b.CAPEM, 0o644); err != nil {
		return fmt.Errorf("write CA bundle: %w", err)
	}
	return nil
}

// reusableBundle returns the CA PEM of the bundle already in opts.Dir when
// it is one SelfSigned would have made for these options and is not close to
// expiry. Any doubt means no: making a new one is cheap.
func reusableBundle(b *SelfSignedBundle, opts SelfSignedOptions) ([]byte, bool) {
	caPEM, err := os.ReadFile(b.CAFile)
	if err != nil {
		return nil, false
	}
	certPEM, err := os.ReadFile(b.CertFile)
	if err != nil {
		return nil, false
	}
	keyPEM, err := os.ReadFile(b.KeyFile)
	if err != nil {
		return nil, false
	}
	pair, err := parsePair(b.CertFile, certPEM, b.KeyFile, keyPEM)
	if err != nil {
		return nil, false
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, false
	}
	now := opts.Clock.Now()
	leaf := pair.leaf
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, false
	}
	for _, name := range opts.DNSNames {
		if leaf.VerifyHostname(name) != nil {
			return nil, false
		}
	}
	for _, ip := range opts.IPAddresses {
		if leaf.VerifyHostname(ip.String()) != nil {
			return nil, false
		}
	}
	lifetime := leaf.NotAfter.Sub(leaf.NotBefore)
	if leaf.NotAfter.Sub(now) < lifetime/3 {
		return nil, false
	}
	return caPEM, true
}

// issuer is a CA certificate with its key, able to sign leaf certificates.
// SelfSigned uses it once and forgets the key; tests use it to issue
// rotated serving certificates and client certificates from one CA.
type issuer struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// newCA makes a self-signed CA that may only sign leaf certificates.
func newCA(commonName string, notBefore, notAfter time.Time) (*issuer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &issuer{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}, nil
}

// issue signs tmpl with a fresh P-256 key and returns the certificate and
// its PKCS#8 key as PEM. tmpl's serial number is filled in.
func (ca *issuer) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// newSerial returns a random positive 128-bit serial, as RFC 5280 asks (at
// most 20 octets, unpredictable).
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// into place, so a reader (a FileSource, a kubectl apply) sees the old
// content or the new, never a partial file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed

	// Chmod rather than rely on the umask, so the key is 0600 whatever the
	// caller's umask is, and certificates are readable by other tools.
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
