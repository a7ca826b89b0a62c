package scaler

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// QueryError is why a query gave no value. Kind is a closed set, used as
// a metric label and a condition reason.
type QueryError struct {
	Kind QueryErrorKind
	Msg  string
}

func (e *QueryError) Error() string { return e.Msg }

// QueryErrorKind classifies a failed query.
type QueryErrorKind string

// The kinds of failed queries. Each is also the MetricAvailable reason.
const (
	// QueryUnreachable: no HTTP answer (connection refused, DNS, TLS).
	QueryUnreachable QueryErrorKind = "PrometheusUnreachable"
	// QueryTimeout: no answer within the query timeout.
	QueryTimeout QueryErrorKind = "QueryTimeout"
	// QueryRejected: Prometheus answered with an error (a bad query, an
	// execution error, 4xx/5xx).
	QueryRejected QueryErrorKind = "QueryRejected"
	// QueryNoSample: the query returned no sample.
	QueryNoSample QueryErrorKind = "NoSample"
	// QuerySeveralSamples: the query returned more than one sample.
	QuerySeveralSamples QueryErrorKind = "SeveralSamples"
	// QueryNotANumber: the sample is NaN or infinite, or the answer is
	// not one a Prometheus server writes.
	QueryNotANumber QueryErrorKind = "NotANumber"
	// QueryAuthUnreadable: the Secret named by authSecretRef cannot be read.
	QueryAuthUnreadable QueryErrorKind = "AuthSecretUnreadable"
)

// QueryErrorKinds lists every kind, for metrics that start at zero.
var QueryErrorKinds = []QueryErrorKind{QueryUnreachable, QueryTimeout, QueryRejected, QueryNoSample, QuerySeveralSamples, QueryNotANumber, QueryAuthUnreadable}

// KindOf returns the kind of a query error; QueryRejected for an error
// that is not a *QueryError.
func KindOf(err error) QueryErrorKind {
	var qe *QueryError
	if errors.As(err, &qe) {
		return qe.Kind
	}
	return QueryRejected
}

// Server is where and how to query.
type Server struct {
	// URL is the base URL: /api/v1/query is appended to its path.
	URL string
	// Token, when set, is sent as a bearer token.
	Token string
	// CA, when set, is a PEM bundle that replaces the system roots.
	CA []byte
}

// ErrServerBusy is returned, without querying, when a server already has
// its limit of queries in flight (or another scaler waits longer for one).
// The caller tries again shortly; the poll is not counted as a failure.
var ErrServerBusy = errors.New("the Prometheus server has its limit of queries in flight")

// Prometheus runs instant queries against any number of servers, with a
// timeout per query and a cap of queries in flight per server, so a slow
// server holds at most that many of the controller's workers and never
// delays scalers of other servers. The scalers waiting for a busy server
// are served first come, first served.
type Prometheus struct {
	// Timeout bounds one query.
	Timeout time.Duration
	// MaxInFlightPerServer caps concurrent queries to one server.
	MaxInFlightPerServer int
	// MaxResponseBytes caps an answer's body.
	MaxResponseBytes int64
	// Wake, when set, is called (under no lock, never blocking) with the
	// key of each waiter a freed slot now belongs to, so that it asks again
	// at once instead of at its next retry: a busy server's slots then go
	// back to work as fast as its queries end.
	Wake func(key string)

	mu      sync.Mutex
	servers map[string]*serverSlots
	clients map[[32]byte]*http.Client
}

// serverSlots are one server's query slots and the scalers waiting for one.
type serverSlots struct {
	inFlight int
	// waiting is FIFO: a free slot goes to the first waiter that asks
	// again. A waiter that has not asked for waiterTTL gave up (its scaler
	// was deleted or paused) and loses its place.
	waiting []waiter
}

type waiter struct {
	key   string
	asked time.Time
}

// waiterTTL is how long a waiter keeps its place without asking again;
// well above the retry delay of a busy scaler.
const waiterTTL = 5 * time.Second

// NewPrometheus returns a query client.
func NewPrometheus(timeout time.Duration, maxInFlightPerServer int) *Prometheus {
	return &Prometheus{Timeout: timeout, MaxInFlightPerServer: max(maxInFlightPerServer, 1), MaxResponseBytes: 1 << 20,
		servers: map[string]*serverSlots{}, clients: map[[32]byte]*http.Client{}}
}

// Acquire takes one of server's query slots for the scaler key without
// waiting; release gives it back. ErrServerBusy when none is free, or when
// scalers that asked earlier are still waiting: without that order, a
// scaler whose poll is due again at once would take every freed slot and
// starve the others of a slow server.
func (p *Prometheus) Acquire(server, key string) (release func(), err error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.servers[server]
	if !ok {
		s = &serverSlots{}
		p.servers[server] = s
	}
	// Forget waiters that stopped asking.
	live := s.waiting[:0]
	at := -1
	for _, w := range s.waiting {
		if w.key == key {
			w.asked = now
		}
		if now.Sub(w.asked) < waiterTTL {
			if w.key == key {
				at = len(live)
			}
			live = append(live, w)
		}
	}
	s.waiting = live
	free := p.MaxInFlightPerServer - s.inFlight
	// The first `free` waiters may go; so may a newcomer when no one waits
	// for the free slots.
	mayGo := free > 0 && (at >= 0 && at < free || at < 0 && len(s.waiting) < free)
	if !mayGo {
		if at < 0 {
			s.waiting = append(s.waiting, waiter{key: key, asked: now})
		}
		return nil, ErrServerBusy
	}
	if at >= 0 {
		s.waiting = append(s.waiting[:at], s.waiting[at+1:]...)
	}
	s.inFlight++
	return func() {
		p.mu.Lock()
		s.inFlight--
		// The waiter the freed slot belongs to is the free-th in line.
		var next string
		if free := p.MaxInFlightPerServer - s.inFlight; free > 0 && len(s.waiting) >= free {
			next = s.waiting[free-1].key
		}
		wake := p.Wake
		p.mu.Unlock()
		if next != "" && wake != nil {
			wake(next)
		}
	}, nil
}

// Forget drops the scaler key from every server's waiters (it was deleted).
func (p *Prometheus) Forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.servers {
		s.waiting = slices.DeleteFunc(s.waiting, func(w waiter) bool { return w.key == key })
	}
}

// client returns an HTTP client that trusts ca (the system roots when
// empty), one per distinct bundle.
func (p *Prometheus) client(ca []byte) (*http.Client, error) {
	key := sha256.Sum256(ca)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[key]; ok {
		return c, nil
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = max(p.MaxInFlightPerServer, 2)
	transport.DialContext = (&net.Dialer{Timeout: p.Timeout, KeepAlive: 30 * time.Second}).DialContext
	if len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, &QueryError{Kind: QueryAuthUnreadable, Msg: "the CA bundle of authSecretRef holds no PEM certificate"}
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c := &http.Client{Transport: transport}
	p.clients[key] = c
	return c, nil
}

// apiResponse is the envelope of Prometheus' HTTP API.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

type queryData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Query evaluates query as an instant query at the server's present time
// (the controller's clock may differ from Prometheus') and returns its one
// value. Every failure is a *QueryError that says what was wrong.
func (p *Prometheus) Query(ctx context.Context, server Server, query string) Reading {
	value, text, err := p.query(ctx, server, query)
	if err != nil {
		return Reading{Err: err}
	}
	return Reading{Value: value, Text: text}
}

func (p *Prometheus) query(ctx context.Context, server Server, query string) (float64, string, error) {
	base, err := url.Parse(server.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return 0, "", &QueryError{Kind: QueryUnreachable, Msg: fmt.Sprintf("server address %q is not an http or https URL", server.URL)}
	}
	endpoint := base.JoinPath("api", "v1", "query")
	endpoint.RawQuery = url.Values{"query": {query}}.Encode()
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint.String(), nil)
	if err != nil {
		return 0, "", &QueryError{Kind: QueryUnreachable, Msg: fmt.Sprintf("build the request to %s: %v", server.URL, err)}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "qn-controller")
	if server.Token != "" {
		req.Header.Set("Authorization", "Bearer "+server.Token)
	}
	c, err := p.client(server.CA)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return 0, "", &QueryError{Kind: QueryTimeout, Msg: fmt.Sprintf("Prometheus at %s did not answer within %s", server.URL, p.Timeout)}
		}
		return 0, "", &QueryError{Kind: QueryUnreachable, Msg: fmt.Sprintf("query Prometheus at %s: %v", server.URL, unwrapURLError(err))}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.MaxResponseBytes+1))
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return 0, "", &QueryError{Kind: QueryTimeout, Msg: fmt.Sprintf("Prometheus at %s did not finish its answer within %s", server.URL, p.Timeout)}
		}
		return 0, "", &QueryError{Kind: QueryUnreachable, Msg: fmt.Sprintf("read the answer of Prometheus at %s: %v", server.URL, err)}
	}
	if int64(len(body)) > p.MaxResponseBytes {
		return 0, "", &QueryError{Kind: QuerySeveralSamples, Msg: fmt.Sprintf("the answer is larger than %d bytes: aggregate the query to one sample (sum, max)", p.MaxResponseBytes)}
	}
	var env apiResponse
	if err := json.Unmarshal(body, &env); err != nil || env.Status == "" {
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			// An authenticating gateway in front of Prometheus (Prometheus
			// itself checks no bearer tokens) refused the credentials.
			return 0, "", &QueryError{Kind: QueryRejected, Msg: fmt.Sprintf("%s refused the query's credentials (HTTP %d %s, %s): put a bearer token it accepts in the Secret of qnMetric.authSecretRef",
				server.URL, resp.StatusCode, http.StatusText(resp.StatusCode), tokenSent(server))}
		}
		return 0, "", &QueryError{Kind: QueryRejected, Msg: fmt.Sprintf("%s answered HTTP %d with a body that is not Prometheus' API (%s): is serverAddress the Prometheus base URL?",
			server.URL, resp.StatusCode, snippet(body))}
	}
	if env.Status != "success" {
		return 0, "", &QueryError{Kind: QueryRejected, Msg: fmt.Sprintf("Prometheus refused the query (HTTP %d, %s): %s", resp.StatusCode, env.ErrorType, env.Error)}
	}
	var data queryData
	if err := json.Unmarshal(env.Data, &data); err != nil {
		return 0, "", &QueryError{Kind: QueryNotANumber, Msg: fmt.Sprintf("the answer's data is not a query result: %v", err)}
	}
	var pair [2]any
	switch data.ResultType {
	case "scalar":
		if err := json.Unmarshal(data.Result, &pair); err != nil {
			return 0, "", &QueryError{Kind: QueryNotANumber, Msg: fmt.Sprintf("the scalar result is not [time, value]: %v", err)}
		}
	case "vector":
		var samples []vectorSample
		if err := json.Unmarshal(data.Result, &samples); err != nil {
			return 0, "", &QueryError{Kind: QueryNotANumber, Msg: fmt.Sprintf("the vector result is not a list of samples: %v", err)}
		}
		switch len(samples) {
		case 0:
			return 0, "", &QueryError{Kind: QueryNoSample, Msg: "the query returned no sample (no series matches, or none is newer than Prometheus' lookback)"}
		case 1:
			pair = samples[0].Value
		default:
			return 0, "", &QueryError{Kind: QuerySeveralSamples, Msg: fmt.Sprintf("the query returned %d samples (e.g. %s): aggregate it to one (sum, max)", len(samples), labels(samples[0].Metric))}
		}
	default:
		return 0, "", &QueryError{Kind: QuerySeveralSamples, Msg: fmt.Sprintf("the query returned a %s: it must return one sample or a scalar (an instant vector of one series)", data.ResultType)}
	}
	text, ok := pair[1].(string)
	if !ok {
		return 0, "", &QueryError{Kind: QueryNotANumber, Msg: fmt.Sprintf("the sample's value %v is not a string, as Prometheus writes it", pair[1])}
	}
	v, err := strconv.ParseFloat(text, 64)
	switch {
	case err != nil:
		return 0, "", &QueryError{Kind: QueryNotANumber, Msg: fmt.Sprintf("the sample's value %q is not a number", text)}
	case math.IsNaN(v) || math.IsInf(v, 0):
		return 0, "", &QueryError{Kind: QueryNotANumber, Msg: fmt.Sprintf("the query returned %s: nothing to compare with the thresholds (a division by zero?)", text)}
	}
	return v, FormatNumber(v), nil
}

// unwrapURLError drops net/http's "Get <long URL>:" prefix: the URL holds
// the whole query, and the server is already named.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// tokenSent says whether a bearer token went with the query.
func tokenSent(server Server) string {
	if server.Token == "" {
		return "no bearer token was sent"
	}
	return "a bearer token was sent"
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return strconv.Quote(s)
}

func labels(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}
