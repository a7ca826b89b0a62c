package webhook

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness condition; nil means ready. Detail, when set,
// adds a line to /readyz?verbose (e.g. the policy revision being served).
type Check struct {
	Name   string
	Check  func() error
	Detail func() string
}

// newProbeHandler serves /healthz (the process answers), /readyz (every
// check passes; ?verbose lists them, as the apiserver's own probes do) and
// /metrics from reg.
func newProbeHandler(reg *prometheus.Registry, checks []Check) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		ready := true
		for _, c := range checks {
			if err := c.Check(); err != nil {
				ready = false
				fmt.Fprintf(&b, "[-]%s failed: %v\n", c.Name, err)
			} else if c.Detail != nil {
				fmt.Fprintf(&b, "[+]%s ok: %s\n", c.Name, c.Detail())
			} else {
				fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, verbose := r.URL.Query()["verbose"]
		if verbose || !ready {
			fmt.Fprint(w, b.String())
		}
		if ready {
			fmt.Fprintln(w, "ok")
		} else {
			fmt.Fprintln(w, "not ready")
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}
