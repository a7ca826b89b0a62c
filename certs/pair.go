package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// servingPair is one loaded certificate/key pair. It is immutable once built,
// so it can be published through an atomic pointer and read by any number of
// handshakes without a lock.
type servingPair struct {
	cert *tls.Certificate
	leaf *x509.Certificate
	// The raw file contents, kept to byte-compare against what is on disk:
	// an unchanged pair is never parsed again.
	certPEM []byte
	keyPEM  []byte
}

// parsePair checks a certificate and key read from certFile and keyFile and
// turns them into a servingPair. Its errors name the file at fault, because
// tls.X509KeyPair's own errors ("failed to find any PEM data in key input")
// do not say which of two mounted files someone has to fix.
func parsePair(certFile string, certPEM []byte, keyFile string, keyPEM []byte) (*servingPair, error) {
	leaf, err := parseLeaf(certFile, certPEM)
	if err != nil {
		return nil, err
	}
	key, err := parsePrivateKey(keyFile, keyPEM)
	if err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return nil, fmt.Errorf("serving key %s does not match the public key of certificate %s (serial %s); was only one of the two files updated?",
			keyFile, certFile, leaf.SerialNumber.Text(16))
	}
	// tls.X509KeyPair stays the authority on what the TLS stack accepts; the
	// checks above only exist to make its failures readable.
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load serving pair %s and %s: %w", certFile, keyFile, err)
	}
	cert.Leaf = leaf
	return &servingPair{
		cert:    &cert,
		leaf:    leaf,
		certPEM: bytes.Clone(certPEM),
		keyPEM:  bytes.Clone(keyPEM),
	}, nil
}

// parseLeaf returns the first certificate of a PEM chain, which is the one
// presented to clients; the rest of the chain is served as is.
func parseLeaf(certFile string, certPEM []byte) (*x509.Certificate, error) {
	rest := certPEM
	var sawKey bool
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if strings.HasSuffix(block.Type, "PRIVATE KEY") {
			sawKey = true
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse serving certificate %s: %w", certFile, err)
		}
		return leaf, nil
	}
	if sawKey {
		return nil, fmt.Errorf("serving certificate %s holds a private key and no CERTIFICATE PEM block; are the certificate and key files swapped?", certFile)
	}
	if len(bytes.TrimSpace(certPEM)) == 0 {
		return nil, fmt.Errorf("serving certificate %s is empty", certFile)
	}
	return nil, fmt.Errorf("serving certificate %s holds no CERTIFICATE PEM block", certFile)
}

// parsePrivateKey accepts the encodings cert-manager and openssl write:
// PKCS#8, PKCS#1 (RSA) and SEC 1 (EC).
func parsePrivateKey(keyFile string, keyPEM []byte) (crypto.Signer, error) {
	rest := keyPEM
	var sawCert bool
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			sawCert = true
		}
		if block.Type != "PRIVATE KEY" && !strings.HasSuffix(block.Type, " PRIVATE KEY") {
			continue
		}
		key, err := parseKeyDER(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse serving key %s: %w", keyFile, err)
		}
		return key, nil
	}
	if sawCert {
		return nil, fmt.Errorf("serving key %s holds a certificate and no PRIVATE KEY PEM block; are the certificate and key files swapped?", keyFile)
	}
	if len(bytes.TrimSpace(keyPEM)) == 0 {
		return nil, fmt.Errorf("serving key %s is empty", keyFile)
	}
	return nil, fmt.Errorf("serving key %s holds no PRIVATE KEY PEM block", keyFile)
}

func parseKeyDER(der []byte) (crypto.Signer, error) {
	if key, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		switch key := key.(type) {
		case *rsa.PrivateKey:
			return key, nil
		case *ecdsa.PrivateKey:
			return key, nil
		case ed25519.PrivateKey:
			return key, nil
		default:
			return nil, fmt.Errorf("unsupported private key type %T", key)
		}
	}
	if key, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return key, nil
	}
	if key, err := x509.ParseECPrivateKey(der); err == nil {
		return key, nil
	}
	return nil, errors.New("not a PKCS#8, PKCS#1 or EC private key")
}
