package scaler

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/certs"
	"github.com/quantumnode/qn-admission/test/promtest"
)

func TestQueryAgainstARealPrometheus(t *testing.T) {
	prom, exp := sharedPrometheus(t)
	exp.Set(queueMetric, "query-one", 17.2)
	exp.Set(queueMetric, "query-two-a", 1)
	exp.Set(queueMetric, "query-two-b", 2)
	p := NewPrometheus(5*time.Second, 4)
	server := Server{URL: prom.URL}
	waitForValue(t, p, server, `qn_test_queue_depth{scenario="query-one"}`, 17.2)

	tests := map[string]struct {
		query    string
		want     float64
		wantKind QueryErrorKind
		wantMsg  string
	}{
		"one series gives its value":         {query: `qn_test_queue_depth{scenario="query-one"}`, want: 17.2},
		"an aggregation gives one value":     {query: `sum(qn_test_queue_depth{scenario=~"query-two-.*"})`, want: 3},
		"a scalar gives its value":           {query: `scalar(qn_test_queue_depth{scenario="query-one"}) * 2`, want: 34.4},
		"a number literal is a scalar":       {query: `42`, want: 42},
		"no series is no sample":             {query: `qn_test_queue_depth{scenario="nobody"}`, wantKind: QueryNoSample, wantMsg: "returned no sample"},
		"two series are refused with a hint": {query: `qn_test_queue_depth{scenario=~"query-two-.*"}`, wantKind: QuerySeveralSamples, wantMsg: "returned 2 samples"},
		"a range vector is refused": {query: `qn_test_queue_depth{scenario="query-one"}[1m]`, wantKind: QuerySeveralSamples,
			wantMsg: "returned a matrix: it must return one sample or a scalar"},
		"NaN is not a number to compare":  {query: `0/0`, wantKind: QueryNotANumber, wantMsg: "returned NaN"},
		"+Inf is not a number to compare": {query: `1/0`, wantKind: QueryNotANumber, wantMsg: "returned +Inf"},
		"a query Prometheus cannot parse carries its parser's message": {query: `sum(rate(x[5m])`, wantKind: QueryRejected,
			wantMsg: "Prometheus refused the query (HTTP 400, bad_data): invalid parameter \"query\": 1:16: parse error: unclosed left parenthesis"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := p.Query(context.Background(), server, tt.query)
			if tt.wantKind == "" {
				if r.Err != nil || r.Value != tt.want {
					t.Fatalf("reading %+v, want %v", r, tt.want)
				}
				if r.Text == "" {
					t.Error("the reading has no text for status")
				}
				return
			}
			if r.Err == nil {
				t.Fatalf("reading %+v, want a %s error", r, tt.wantKind)
			}
			if KindOf(r.Err) != tt.wantKind || !strings.Contains(r.Err.Error(), tt.wantMsg) {
				t.Errorf("error %s: %q; want %s containing %q", KindOf(r.Err), r.Err, tt.wantKind, tt.wantMsg)
			}
		})
	}
}

func TestQueryFailuresSayWhatWasWrong(t *testing.T) {
	// A listener that accepts and never answers: a Prometheus that hangs.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	closed, err := promtest.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	notPrometheus := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<html>404 page not found</html>"))
	}))
	defer notPrometheus.Close()
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[` + strings.Repeat(`{"metric":{},"value":[1,"1"]},`, 100000)))
	}))
	defer huge.Close()

	tests := map[string]struct {
		url      string
		wantKind QueryErrorKind
		wantMsg  string
	}{
		"a server that does not answer in time is a timeout": {url: "http://" + hung.Addr().String(), wantKind: QueryTimeout, wantMsg: "did not answer within 300ms"},
		"nothing listening is unreachable":                   {url: "http://" + closed, wantKind: QueryUnreachable, wantMsg: "connection refused"},
		"a server that is not Prometheus is named as such": {url: notPrometheus.URL, wantKind: QueryRejected,
			wantMsg: `answered HTTP 404 with a body that is not Prometheus' API ("<html>404 page not found</html>"): is serverAddress the Prometheus base URL?`},
		"an answer larger than the cap is refused before it is decoded": {url: huge.URL, wantKind: QuerySeveralSamples, wantMsg: "larger than 1048576 bytes"},
		"an address that is not a URL is refused":                       {url: "prometheus:9090", wantKind: QueryUnreachable, wantMsg: `"prometheus:9090" is not an http or https URL`},
	}
	p := NewPrometheus(300*time.Millisecond, 4)
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			r := p.Query(context.Background(), Server{URL: tt.url}, "up")
			if KindOf(r.Err) != tt.wantKind || r.Err == nil || !strings.Contains(r.Err.Error(), tt.wantMsg) {
				t.Errorf("reading %+v (%v), want %s containing %q", r, KindOf(r.Err), tt.wantKind, tt.wantMsg)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the query took %s: the timeout did not bound it", took)
			}
		})
	}
}

func TestABearerTokenIsSent(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"scalar","result":[1,"7"]}}`))
	}))
	defer srv.Close()
	r := NewPrometheus(time.Second, 1).Query(context.Background(), Server{URL: srv.URL, Token: "s3cret"}, "7")
	if r.Err != nil || r.Value != 7 {
		t.Fatalf("reading %+v", r)
	}
	if got != "Bearer s3cret" {
		t.Errorf("Authorization = %q, want the bearer token", got)
	}
}

// A Prometheus serving TLS is reached with the CA the scaler's Secret
// holds, and refused without it.
func TestACABundleVerifiesAnHTTPSPrometheus(t *testing.T) {
	_, exp := sharedPrometheus(t)
	dir := t.TempDir()
	bundle, err := certs.SelfSigned(certs.SelfSignedOptions{Dir: filepath.Join(dir, "tls"), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	prom, err := promtest.Start(promtest.Binary(t), promtest.Options{Dir: dir, Targets: []string{exp.Target()}, TLSCertFile: bundle.CertFile, TLSKeyFile: bundle.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()
	p := NewPrometheus(5*time.Second, 4)
	if r := p.Query(context.Background(), Server{URL: prom.URL, CA: bundle.CAPEM}, "42"); r.Err != nil || r.Value != 42 {
		t.Errorf("with the CA: reading %+v", r)
	}
	r := p.Query(context.Background(), Server{URL: prom.URL}, "42")
	if KindOf(r.Err) != QueryUnreachable || !strings.Contains(r.Err.Error(), "certificate") {
		t.Errorf("without the CA: reading %+v, want a certificate error", r)
	}
	r = p.Query(context.Background(), Server{URL: prom.URL, CA: []byte("not pem")}, "42")
	if KindOf(r.Err) != QueryAuthUnreadable {
		t.Errorf("with a CA that is not PEM: reading %+v, want %s", r, QueryAuthUnreadable)
	}
}

func TestAFullServerRefusesAtOnceAndOthersAreUntouched(t *testing.T) {
	p := NewPrometheus(time.Second, 2)
	r1, err := p.Acquire("http://slow", "a")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := p.Acquire("http://slow", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire("http://slow", "c"); !errors.Is(err, ErrServerBusy) {
		t.Fatalf("a third query to a server with two in flight: %v, want ErrServerBusy", err)
	}
	other, err := p.Acquire("http://fast", "d")
	if err != nil {
		t.Fatalf("another server is refused while the first is full: %v", err)
	}
	other()
	r1()
	r3, err := p.Acquire("http://slow", "c")
	if err != nil {
		t.Fatalf("a slot given back is not free again for the waiter: %v", err)
	}
	r2()
	r3()
}

// Scalers waiting for a busy server are served in the order they came: the
// one whose query just ended, due again at once, does not jump the queue.
func TestWaitersOfABusyServerAreServedInOrder(t *testing.T) {
	p := NewPrometheus(time.Second, 1)
	release, err := p.Acquire("http://slow", "first")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"second", "third"} {
		if _, err := p.Acquire("http://slow", key); !errors.Is(err, ErrServerBusy) {
			t.Fatalf("%s: %v, want ErrServerBusy", key, err)
		}
	}
	release()
	if _, err := p.Acquire("http://slow", "first"); !errors.Is(err, ErrServerBusy) {
		t.Fatalf("the scaler that just had the slot took it again before those waiting: %v", err)
	}
	if _, err := p.Acquire("http://slow", "third"); !errors.Is(err, ErrServerBusy) {
		t.Fatalf("third took the slot before second: %v", err)
	}
	release, err = p.Acquire("http://slow", "second")
	if err != nil {
		t.Fatalf("the first waiter did not get the free slot: %v", err)
	}
	release()
	release, err = p.Acquire("http://slow", "third")
	if err != nil {
		t.Fatalf("the next waiter did not get the free slot: %v", err)
	}
	release()
	// A deleted scaler gives its place up at once.
	p = NewPrometheus(time.Second, 1)
	if release, err = p.Acquire("http://slow", "third"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire("http://slow", "fourth"); !errors.Is(err, ErrServerBusy) {
		t.Fatal(err)
	}
	if _, err := p.Acquire("http://slow", "fifth"); !errors.Is(err, ErrServerBusy) {
		t.Fatal(err)
	}
	p.Forget("fourth")
	release()
	if release, err = p.Acquire("http://slow", "fifth"); err != nil {
		t.Fatalf("the waiter behind a deleted scaler did not move up: %v", err)
	}
	release()
}

// A freed slot wakes the waiter it now belongs to, at once.
func TestAFreedSlotWakesItsWaiter(t *testing.T) {
	p := NewPrometheus(time.Second, 2)
	var woken []string
	p.Wake = func(key string) { woken = append(woken, key) }
	r1, _ := p.Acquire("http://slow", "a")
	r2, _ := p.Acquire("http://slow", "b")
	for _, key := range []string{"c", "d", "e"} {
		if _, err := p.Acquire("http://slow", key); !errors.Is(err, ErrServerBusy) {
			t.Fatal(err)
		}
	}
	r1()
	if len(woken) != 1 || woken[0] != "c" {
		t.Fatalf("woken %v after one slot freed, want [c]", woken)
	}
	r2()
	if len(woken) != 2 || woken[1] != "d" {
		t.Fatalf("woken %v after two slots freed, want [c d]", woken)
	}
	if release, err := p.Acquire("http://slow", "d"); err != nil {
		t.Fatalf("d, second in line with two free slots: %v", err)
	} else {
		release()
	}
}
