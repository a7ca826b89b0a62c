package health

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// listen opens a real TCP socket on loopback and returns its port.
func listen(t *testing.T) (net.Listener, int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, int32(ln.Addr().(*net.TCPAddr).Port)
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int32 {
	ln, port := listen(t)
	ln.Close()
	return port
}

func serverPort(t *testing.T, s *httptest.Server) int32 {
	_, p, err := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return int32(n)
}

func TestCheckAgainstRealSockets(t *testing.T) {
	ln, open := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.Error(w, "broken", http.StatusServiceUnavailable)
	}))
	t.Cleanup(healthy.Close)
	// A server that accepts and never answers: the check must give up at
	// its timeout.
	hung := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hung }))
	t.Cleanup(func() { close(hung); silent.Close() })

	tests := map[string]struct {
		port    ProbePort
		wantErr string
	}{
		"a TCP connect to a listening port passes":        {port: ProbePort{Port: open}},
		"a TCP connect to a closed port fails":            {port: ProbePort{Port: closedPort(t)}, wantErr: "connection refused"},
		"an HTTP GET answered 204 passes":                 {port: ProbePort{Port: serverPort(t, healthy), HTTPPath: "/healthz"}},
		"an HTTP GET answered 503 fails with the status":  {port: ProbePort{Port: serverPort(t, healthy), HTTPPath: "/ready"}, wantErr: "HTTP 503"},
		"an HTTP GET never answered fails at the timeout": {port: ProbePort{Port: serverPort(t, silent), HTTPPath: "/"}, wantErr: "no answer within 200ms"},
		"an HTTP GET of a closed port fails":              {port: ProbePort{Port: closedPort(t), HTTPPath: "/"}, wantErr: "connection refused"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := Check(context.Background(), "127.0.0.1", tt.port, 200*time.Millisecond)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	if err := Check(context.Background(), "", ProbePort{Port: open}, time.Second); err == nil {
		t.Errorf("a Node without an address passed its check")
	}
}

// TestProberCountsFailuresInARowAndNotifies runs the prober's loop against
// a real port that closes and opens again.
func TestProberCountsFailuresInARowAndNotifies(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "edge-1"}
	var mu sync.Mutex
	notified := 0
	p := NewProber(func(k types.NamespacedName) {
		if k != key {
			t.Errorf("notified for %v", k)
		}
		mu.Lock()
		notified++
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Start(ctx) }()
	defer func() { cancel(); <-done }()

	ln, port := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	p.Track(ProbeTarget{Key: key, Address: "127.0.0.1", Ports: []ProbePort{{Name: "grpc", Port: port}}, Period: 20 * time.Millisecond, Timeout: 100 * time.Millisecond, MaxFailures: 2})
	waitFor(t, "a first passing check", func() bool {
		r, ok := p.Results(key)["grpc"]
		return ok && r.Failures == 0
	})
	ln.Close()
	waitFor(t, "failures capped at MaxFailures+1", func() bool { return p.Results(key)["grpc"].Failures == 3 })
	mu.Lock()
	atCap := notified
	mu.Unlock()
	time.Sleep(100 * time.Millisecond) // more failed checks run meanwhile
	mu.Lock()
	if notified != atCap {
		t.Errorf("notified %d more times after the count reached its cap", notified-atCap)
	}
	mu.Unlock()
	if got := p.Results(key)["grpc"].Error; !strings.Contains(got, "connection refused") {
		t.Errorf("last error %q", got)
	}

	p.Forget(key)
	if p.Results(key) != nil || p.Tracked() != 0 {
		t.Errorf("a forgotten node still has results")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
