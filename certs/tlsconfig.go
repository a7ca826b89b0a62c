package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// CertificateGetter is what a TLS server needs from a certificate source:
// the pair to present, asked on every handshake. FileSource implements it.
type CertificateGetter interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// ServerTLSConfig returns the webhook server's TLS configuration: TLS 1.2 at
// least, the serving certificate taken from source on every handshake (so
// rotations apply to new connections at once), and, when clientCAFile is
// not empty, a required client certificate signed by a CA in that file, so
// only kube-apiserver (configured with a client certificate for this
// webhook through its AdmissionConfiguration) can call us.
//
// NextProtos offers only HTTP/1.1: admission requests are single short
// exchanges and HTTP/2 only adds attack surface (CVE-2023-44487 led
// controller-runtime and cert-manager to turn it off for webhooks). net/http's
// ServeTLS re-adds "h2" unless the http.Server's Protocols (or TLSNextProto)
// turn HTTP/2 off too; that choice belongs to the server.
//
// The client CA file is read once; changing it needs a restart.
func ServerTLSConfig(source CertificateGetter, clientCAFile string) (*tls.Config, error) {
	if source == nil {
		return nil, errors.New("server TLS config: no certificate source")
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: source.GetCertificate,
		NextProtos:     []string{"http/1.1"},
	}
	if clientCAFile == "" {
		return cfg, nil
	}
	caPEM, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("read client CA file %s: %w", clientCAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("client CA file %s holds no PEM certificate", clientCAFile)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return cfg, nil
}
