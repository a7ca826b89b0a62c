// Command ceiling is the bare-TLS ceiling of the load comparison: the least
// any admission webhook must do. It terminates TLS, reads the body, decodes
// the AdmissionReview and admits it. Whatever a real webhook spends beyond
// this is the cost of judging.
//
// It serves HTTP/1.1 only, like qn-webhook, and prints the same JSON line
// ({"msg":"serving admission webhooks","address":...}) when it listens.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/certs"
)

const maxBody = 7 << 20 // qn-webhook's default limit

func main() {
	addr := flag.String("listen-address", "127.0.0.1:8443", "HTTPS address.")
	dir := flag.String("tls-dir", os.TempDir()+"/qn-ceiling-certs", "Where the self-signed CA (ca.crt) and serving pair are written.")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	if err := run(*addr, *dir, logger); err != nil {
		fmt.Fprintf(os.Stderr, "ceiling: %v\n", err)
		os.Exit(1)
	}
}

func run(addr, dir string, logger *slog.Logger) error {
	bundle, err := certs.SelfSigned(certs.SelfSignedOptions{Dir: dir, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return err
	}
	tlsConfig, err := tls12Pair(bundle.CertFile, bundle.KeyFile)
	if err != nil {
		return err
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:           http.HandlerFunc(admit),
		TLSConfig:         tlsConfig,
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errs := make(chan error, 1)
	go func() { errs <- srv.ServeTLS(ln, "", "") }()
	logger.Info("serving admission webhooks", "address", ln.Addr().String(), "caFile", bundle.CAFile)
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// admit decodes the review and answers allowed, echoing the uid.
func admit(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rev); err != nil || rev.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	out, _ := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: rev.Request.UID, Allowed: true},
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func tls12Pair(certFile, keyFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}}, nil
}
