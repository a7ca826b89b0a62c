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
	"slices"
	"strings"
	"sync/atomic"
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
	flag.StringVar(&answerLikeQN, "answer-like-qn", "", "Answer with the parts of qn-webhook's answer to an admitted create, comma-separated: status, annotations (its four audit annotations), patch (on /mutate, its one-label JSON patch); all for the three. By default the bare allowed. What such an answer costs the API server, apart from what judging costs.")
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
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", admit)
	mux.HandleFunc("GET /handled", handled)
	srv := &http.Server{
		Handler:           mux,
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

// answerLikeQN names the parts of qn-webhook's answer admit sends
// (--answer-like-qn).
var answerLikeQN string

func likeQN(part string) bool {
	return answerLikeQN == "all" || slices.Contains(strings.Split(answerLikeQN, ","), part)
}

// handledNanos and handledCount add up the time admit took, from its
// start to the answer written; GET /handled reports them.
var handledNanos, handledCount atomic.Int64

// handled reports the admit calls so far and the time they took:
// {"count":n,"seconds":s}.
func handled(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"count":%d,"seconds":%g}`, handledCount.Load(), time.Duration(handledNanos.Load()).Seconds())
}

// likeQNPatch adds one label, as qn-webhook's bundled mutation does (its
// own key, so the stored object tells the two apart).
var likeQNPatch = []byte(`[{"op":"add","path":"/metadata/labels/qn.dev~1ceiling","value":"qn-admission"}]`)

// admit decodes the review and answers allowed, echoing the uid.
func admit(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() {
		handledNanos.Add(int64(time.Since(start)))
		handledCount.Add(1)
	}()
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
	resp := &admissionv1.AdmissionResponse{UID: rev.Request.UID, Allowed: true}
	if likeQN("status") {
		resp.Result = &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusOK}
	}
	if likeQN("annotations") {
		resp.AuditAnnotations = map[string]string{
			"revision": "sha256:6f1c0e3b9a7d4e25c8b1f0a9d3e7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9",
			"decision": "allowed",
			"role":     "realtime",
			"window":   "1/120 per 60s by user:" + rev.Request.UserInfo.Username,
		}
	}
	if likeQN("patch") && r.URL.Path == "/mutate" {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = likeQNPatch, &pt
	}
	out, _ := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
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
