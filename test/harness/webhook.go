package harness

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quantumnode/qn-admission/certs"
)

// ServingMessage is the log line qn-webhook writes once it serves, with
// its addresses (the load suite's bare-TLS ceiling writes it too).
const ServingMessage = "serving admission webhooks"

// Serving are the addresses a server reported in its ServingMessage line.
type Serving struct {
	// Address is host:port of the HTTPS admission listener.
	Address string `json:"address"`
	// Probe is host:port of the plain-HTTP probe listener, if any.
	Probe string `json:"probeAddress"`
}

// StartServing runs bin and waits, up to timeout, until it logs
// ServingMessage as a JSON line on stdout.
func StartServing(bin string, args []string, opts ProcessOptions, timeout time.Duration) (*Process, Serving, error) {
	serving := make(chan Serving, 1)
	onLine := opts.OnLine
	opts.OnLine = func(line []byte) {
		var entry struct {
			Msg string `json:"msg"`
			Serving
		}
		if json.Unmarshal(line, &entry) == nil && entry.Msg == ServingMessage {
			select {
			case serving <- entry.Serving:
			default:
			}
		}
		if onLine != nil {
			onLine(line)
		}
	}
	p, err := Start(bin, args, opts)
	if err != nil {
		return nil, Serving{}, err
	}
	select {
	case s := <-serving:
		return p, s, nil
	case <-p.Exited():
		return nil, Serving{}, fmt.Errorf("%s exited before serving:\n%s", p.Name(), p.Logs())
	case <-time.After(timeout):
		_ = p.Stop()
		return nil, Serving{}, fmt.Errorf("%s did not start serving within %s:\n%s", p.Name(), timeout, p.Logs())
	}
}

// WebhookOptions tune StartWebhook.
type WebhookOptions struct {
	// Args are flags after the harness's own (TLS, addresses, JSON logs),
	// so they may override them.
	Args []string
	// Process are the process's options (environment, output kept).
	Process ProcessOptions
}

// Webhook is a running qn-webhook.
type Webhook struct {
	*Process
	Serving
	// CABundle is the self-signed CA the serving certificate chains to,
	// and RootCAs the same as a pool.
	CABundle []byte
	RootCAs  *x509.CertPool
}

// StartWebhook runs the qn-webhook binary bin with a self-signed pair in
// certDir on free loopback ports, logging JSON, and waits until it says it
// serves.
func StartWebhook(bin, certDir string, opts WebhookOptions) (*Webhook, error) {
	args := append([]string{
		"--tls-self-signed", "--tls-self-signed-dir", certDir,
		"--listen-address", "127.0.0.1:0", "--probe-address", "127.0.0.1:0",
		"--log-format", "json",
	}, opts.Args...)
	p, serving, err := StartServing(bin, args, opts.Process, 60*time.Second)
	if err != nil {
		return nil, err
	}
	w := &Webhook{Process: p, Serving: serving}
	if w.CABundle, w.RootCAs, err = ReadCA(filepath.Join(certDir, certs.CAFileName)); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return w, nil
}

// ReadCA reads a PEM CA bundle, as bytes and as a pool.
func ReadCA(file string) ([]byte, *x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("read the CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%s holds no certificate", file)
	}
	return pem, pool, nil
}

// URL is the HTTPS URL of an admission path.
func (w *Webhook) URL(path string) string { return "https://" + w.Address + path }

// ProbeURL is the URL of a probe path (/healthz, /readyz?verbose,
// /metrics).
func (w *Webhook) ProbeURL(path string) string { return "http://" + w.Probe + path }

// Readiness returns the body of /readyz?verbose.
func (w *Webhook) Readiness() (string, error) { return w.get("/readyz?verbose") }

// Metrics returns the Prometheus exposition of /metrics.
func (w *Webhook) Metrics() (string, error) { return w.get("/metrics") }

func (w *Webhook) get(path string) (string, error) {
	resp, err := http.Get(w.ProbeURL(path))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// LogField returns field key of the first JSON log line whose msg is msg,
// or "" if the process printed none.
func (p *Process) LogField(msg, key string) string {
	for line := range strings.SplitSeq(p.Logs(), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == msg {
			v, _ := entry[key].(string)
			return v
		}
	}
	return ""
}
