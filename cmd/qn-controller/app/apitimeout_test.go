package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// stallingAPIServer answers watches with a stream of events for stream,
// and holds every other request for an hour (or until the client goes).
func stallingAPIServer(t *testing.T, stream time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", "application/json")
			end := time.Now().Add(stream)
			for time.Now().Before(end) {
				fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1"}}}`)
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(time.Hour):
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// --kube-api-timeout reaches the client qn-controller builds: a request
// the API server never answers fails at the deadline; a watch streaming
// longer than it is not cut.
func TestAStalledAPIServerFailsTheRequestAtTheTimeoutButNotAWatch(t *testing.T) {
	srv := stallingAPIServer(t, 600*time.Millisecond)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := NewOptions(env(false))
	opts.Kubeconfig = kubeconfig
	opts.KubeAPITimeout = 200 * time.Millisecond
	cfg, err := opts.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 0 {
		t.Errorf("rest.Config.Timeout = %s; it would cut every watch", cfg.Timeout)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// A guard of 10 s, so that without the timeout the test fails rather
	// than hangs.
	guard, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(guard, http.MethodGet, srv.URL+"/api/v1/namespaces/default/configmaps/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Errorf("a stalled GET returned %v after %s; want the deadline after about 200ms", err, took)
	}

	resp, err = client.Get(srv.URL + "/api/v1/namespaces/default/configmaps?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(body), "BOOKMARK") < 10 {
		t.Errorf("the watch was cut: %v after %d events", err, strings.Count(string(body), "BOOKMARK"))
	}
}
