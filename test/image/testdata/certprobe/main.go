// Command certprobe verifies the certificate on its standard input against
// the system's roots, as Go finds them (x509.SystemCertPool): run inside an
// image's root file system, it shows whether a Go program there trusts the
// image's CA bundle. Exit 0: verified; 1: not.
package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		fail(fmt.Errorf("no PEM block on stdin"))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		fail(err)
	}
	// Roots left nil: the system pool, read from the file system.
	if _, err := cert.Verify(x509.VerifyOptions{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		fail(fmt.Errorf("%s: %w", cert.Subject, err))
	}
	fmt.Printf("verified %s\n", cert.Subject)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "certprobe:", err)
	os.Exit(1)
}
