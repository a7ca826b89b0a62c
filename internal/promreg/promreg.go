// Package promreg registers Prometheus collectors the way qn-controller's
// reconcilers need: tests start several managers in one process, each
// registering the same metrics.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterReplacing registers c, replacing a collector of the same metric
// left by an earlier manager in this process: the metric then follows the
// newest one instead of failing its setup.
func RegisterReplacing(reg prometheus.Registerer, c prometheus.Collector) error {
	err := reg.Register(c)
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		return err
	}
	reg.Unregister(already.ExistingCollector)
	return reg.Register(c)
}
