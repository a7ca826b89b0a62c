// Package health judges a QuantumNode's health and decides the repair
// ladder's next step. It holds no client and no clock: Next is a pure
// function from what the controller observed (the Node, the Service's
// EndpointSlices, the active checks, the status so far) to the state and
// the action, so every transition of docs/controller.md's table is a unit
// test. The effects of an action live in controller/remediation.
package health

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// Defaults of a QuantumNodeHealthPolicy, applied where a field is unset.
const (
	DefaultNodeDegradedAfter      = 30 * time.Second
	DefaultNodeFailedAfter        = 5 * time.Minute
	DefaultEndpointsMinReady      = 1
	DefaultEndpointsDegradedAfter = 0
	DefaultEndpointsFailedAfter   = 5 * time.Minute
	DefaultProbePeriod            = 10 * time.Second
	DefaultProbeTimeout           = time.Second
	DefaultProbeMaxFailures       = 3
	DefaultRestartTimeout         = 2 * time.Minute
	DefaultRestartAttempts        = 1
	DefaultRescheduleTimeout      = 5 * time.Minute
	DefaultRebuildTimeout         = 10 * time.Minute
	DefaultMaxInFlight            = 1
	DefaultFailedRestarts         = 2
	DefaultIsolationWindow        = 5 * time.Minute
)

// DefaultMaxUnhealthy is remediation.maxUnhealthy when unset.
var DefaultMaxUnhealthy = intstr.FromString("40%")

// Settings are a policy's thresholds with every default applied.
type Settings struct {
	NodeDegradedAfter time.Duration
	NodeFailedAfter   time.Duration
	// Endpoints is nil when the policy does not check them.
	Endpoints *EndpointSettings
	// Probe is nil when the policy does not check ports actively.
	Probe *ProbeSettings
	// Ladder is the remediation; no steps means report only.
	Ladder Ladder
	// AutoRollback patches a spec that missed its deadline back.
	AutoRollback bool
}

// EndpointSettings are the EndpointSlice signal's thresholds.
type EndpointSettings struct {
	MinReady      int
	DegradedAfter time.Duration
	FailedAfter   time.Duration
}

// ProbeSettings are the active check's.
type ProbeSettings struct {
	Period      time.Duration
	Timeout     time.Duration
	MaxFailures int
	// Ports says how a declared service is checked, by its name; a service
	// not in the map is checked by TCP connect.
	Ports map[string]qnv1alpha1.PortProbe
}

// Step is one rung of the ladder.
type Step struct {
	Action   qnv1alpha1.RemediationAction
	Timeout  time.Duration
	Attempts int
}

// Ladder is the remediation part of a policy.
type Ladder struct {
	// Steps in the order they are climbed; empty means report only.
	Steps []Step
	// Reschedule's pool and Rebuild's opt-in, read by the effects.
	Reschedule *qnv1alpha1.RescheduleStep
	Rebuild    *qnv1alpha1.RebuildStep

	MaxUnhealthy    intstr.IntOrString
	MaxInFlight     int
	FailedRestarts  int
	IsolationWindow time.Duration
	DryRun          bool
}

// Remediates says the ladder has a step to climb.
func (l Ladder) Remediates() bool { return len(l.Steps) > 0 }

func (l Ladder) step(a qnv1alpha1.RemediationAction) (Step, bool) {
	for _, s := range l.Steps {
		if s.Action == a {
			return s, true
		}
	}
	return Step{}, false
}

// Resolve applies the defaults to a policy's spec. It also returns the
// problems it corrected (a FailedAfter shorter than its DegradedAfter is
// raised to it), as sentences for the policy's events.
func Resolve(spec *qnv1alpha1.QuantumNodeHealthPolicySpec) (Settings, []string) {
	var problems []string
	s := Settings{
		NodeDegradedAfter: duration(spec.Node.DegradedAfter, DefaultNodeDegradedAfter),
		NodeFailedAfter:   duration(spec.Node.FailedAfter, DefaultNodeFailedAfter),
	}
	if s.NodeFailedAfter < s.NodeDegradedAfter {
		problems = append(problems, fmt.Sprintf("spec.node.failedAfter %s is shorter than degradedAfter %s; using %s", s.NodeFailedAfter, s.NodeDegradedAfter, s.NodeDegradedAfter))
		s.NodeFailedAfter = s.NodeDegradedAfter
	}
	if e := spec.Endpoints; e != nil {
		s.Endpoints = &EndpointSettings{
			MinReady:      int(count(e.MinReady, DefaultEndpointsMinReady)),
			DegradedAfter: duration(e.DegradedAfter, DefaultEndpointsDegradedAfter),
			FailedAfter:   duration(e.FailedAfter, DefaultEndpointsFailedAfter),
		}
		if s.Endpoints.FailedAfter < s.Endpoints.DegradedAfter {
			problems = append(problems, fmt.Sprintf("spec.endpoints.failedAfter %s is shorter than degradedAfter %s; using %s", s.Endpoints.FailedAfter, s.Endpoints.DegradedAfter, s.Endpoints.DegradedAfter))
			s.Endpoints.FailedAfter = s.Endpoints.DegradedAfter
		}
	}
	if p := spec.Probe; p != nil {
		s.Probe = &ProbeSettings{
			Period:      duration(p.Period, DefaultProbePeriod),
			Timeout:     duration(p.Timeout, DefaultProbeTimeout),
			MaxFailures: int(count(p.MaxConsecutiveFailures, DefaultProbeMaxFailures)),
			Ports:       map[string]qnv1alpha1.PortProbe{},
		}
		if s.Probe.Period < 100*time.Millisecond {
			problems = append(problems, fmt.Sprintf("spec.probe.period %s is below 100ms; using 100ms", s.Probe.Period))
			s.Probe.Period = 100 * time.Millisecond
		}
		if s.Probe.Timeout <= 0 || s.Probe.Timeout > s.Probe.Period {
			problems = append(problems, fmt.Sprintf("spec.probe.timeout %s must be positive and at most the period %s; using %s", s.Probe.Timeout, s.Probe.Period, s.Probe.Period))
			s.Probe.Timeout = s.Probe.Period
		}
		for _, port := range p.Ports {
			s.Probe.Ports[port.Name] = port
		}
	}
	if spec.Rollback != nil {
		s.AutoRollback = spec.Rollback.Automatic
	}
	r := spec.Remediation
	if r == nil {
		return s, problems
	}
	l := &s.Ladder
	if r.Restart != nil {
		l.Steps = append(l.Steps, Step{Action: qnv1alpha1.ActionRestart, Timeout: duration(r.Restart.Timeout, DefaultRestartTimeout), Attempts: int(count(r.Restart.Attempts, DefaultRestartAttempts))})
	}
	if r.Reschedule != nil {
		l.Steps = append(l.Steps, Step{Action: qnv1alpha1.ActionReschedule, Timeout: duration(r.Reschedule.Timeout, DefaultRescheduleTimeout), Attempts: 1})
		l.Reschedule = r.Reschedule
	}
	if r.Rebuild != nil {
		l.Steps = append(l.Steps, Step{Action: qnv1alpha1.ActionRebuild, Timeout: duration(r.Rebuild.Timeout, DefaultRebuildTimeout), Attempts: 1})
		l.Rebuild = r.Rebuild
	}
	l.MaxUnhealthy = DefaultMaxUnhealthy
	if r.MaxUnhealthy != nil {
		l.MaxUnhealthy = *r.MaxUnhealthy
	}
	if _, err := intstr.GetScaledValueFromIntOrPercent(&l.MaxUnhealthy, 100, false); err != nil {
		problems = append(problems, fmt.Sprintf("spec.remediation.maxUnhealthy %q is neither a count nor a percentage; using 0 (no remediation while any node is unhealthy)", l.MaxUnhealthy.String()))
		l.MaxUnhealthy = intstr.FromInt32(0)
	}
	l.MaxInFlight = int(count(r.MaxInFlight, DefaultMaxInFlight))
	l.FailedRestarts, l.IsolationWindow = DefaultFailedRestarts, DefaultIsolationWindow
	if r.Isolation != nil {
		l.FailedRestarts = int(count(r.Isolation.FailedRestarts, DefaultFailedRestarts))
		l.IsolationWindow = duration(r.Isolation.Window, DefaultIsolationWindow)
	}
	l.DryRun = r.DryRun
	return s, problems
}

// AllowedUnhealthy is how many of selected nodes may be unhealthy while
// the ladder still acts: maxUnhealthy scaled, rounded up (40% of 10 is 4,
// of 3 is 2, of 1 is 1), so that a policy of a few nodes can repair one;
// a percentage of 0 allows none.
func (l Ladder) AllowedUnhealthy(selected int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&l.MaxUnhealthy, selected, true)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func duration(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration < 0 {
		return def
	}
	return d.Duration
}

func count(n *int32, def int32) int32 {
	if n == nil || *n < 0 {
		return def
	}
	return *n
}
