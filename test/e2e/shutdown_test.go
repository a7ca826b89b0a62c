package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// TestSIGTERMDrainsInFlightRequests: a request that is still being sent
// when qn-webhook gets SIGTERM is answered in full before the process
// exits, and the process exits cleanly.
func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	w, err := startWebhook(t.TempDir(), "--shutdown-grace-period", "10s")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.CABundle)
	conn, err := tls.Dial("tcp", w.Address, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"drain-1","kind":{"group":"qn.dev","version":"v1alpha1","kind":"QuantumNode"},"resource":{"group":"qn.dev","version":"v1alpha1","resource":"quantumnodes"},"operation":"CREATE","userInfo":{"username":"alice"},"object":%s}}`,
		`{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":"a"},"spec":{"hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883}]}}`)
	half := len(body) / 2
	head := fmt.Sprintf("POST /validate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", w.Address, len(body))
	if _, err := conn.Write([]byte(head + body[:half])); err != nil {
		t.Fatal(err)
	}
	// Wait until the handler is running (reading the body): Go's server
	// counts a request as in flight from then on. A request whose headers
	// were not read yet is closed unanswered, which clients retry.
	inFlight := `qn_admission_requests_in_flight{webhook="validate"} 1`
	harness.WaitFor(t, 10*time.Second, "the request shows as in flight", func() error {
		if m, err := w.Metrics(); err != nil || !strings.Contains(m, inFlight) {
			return fmt.Errorf("no %s (%v)", inFlight, err)
		}
		return nil
	})
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, "qn-webhook drains", func() error {
		if !strings.Contains(w.Logs(), "shutting down: draining in-flight admission requests") {
			return fmt.Errorf("no draining line:\n%s", w.Logs())
		}
		return nil
	})
	if _, err := conn.Write([]byte(body[half:])); err != nil {
		t.Fatalf("the in-flight request's connection was dropped: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the in-flight request: %v\n%s", err, w.Logs())
	}
	defer resp.Body.Close()
	var answer strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&answer)
	if resp.StatusCode != 200 || !strings.Contains(answer.String(), `"uid":"drain-1","allowed":true`) {
		t.Fatalf("the in-flight request must be answered in full: %d %s", resp.StatusCode, answer.String())
	}
	select {
	case <-w.Exited():
	case <-time.After(15 * time.Second):
		t.Fatal("qn-webhook did not exit after draining")
	}
	if code := w.ExitCode(); code != 0 {
		t.Fatalf("qn-webhook exited with %d:\n%s", code, w.Logs())
	}
}
