package health

import (
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// NodeSignalOf reads the Node signal from node (nil: not found); name is
// the Node the QuantumNode asks for, "" when it is bound by label.
func NodeSignalOf(node *corev1.Node, name string) NodeSignal {
	if node == nil {
		return NodeSignal{Name: name}
	}
	s := NodeSignal{Name: node.Name, Found: true, Why: " (it reports no Ready condition)"}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		s.Ready = c.Status == corev1.ConditionTrue
		s.NotReadySince = c.LastTransitionTime.Time
		switch {
		case s.Ready:
			s.Why = ""
		case c.Reason != "" && c.Message != "":
			s.Why = fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		case c.Reason != "":
			s.Why = fmt.Sprintf(" (%s)", c.Reason)
		default:
			s.Why = fmt.Sprintf(" (Ready is %s)", c.Status)
		}
	}
	return s
}

// NodeAddress is where the active check reaches a Node: its first
// InternalIP, else ExternalIP, else Hostname; "" when it reports none.
func NodeAddress(node *corev1.Node) string {
	if node == nil {
		return ""
	}
	for _, want := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName} {
		for _, a := range node.Status.Addresses {
			if a.Type == want && a.Address != "" {
				return a.Address
			}
		}
	}
	return ""
}

// PortSignals reads each declared service's signals: the ready endpoints
// of the port of that name and number in slices (the Service's EndpointSlices), and
// the active check's results (nil when none ran). An address counts once
// per port however many slices list it.
func PortSignals(qn *qnv1alpha1.QuantumNode, slices []*discoveryv1.EndpointSlice, probes map[string]ProbeResult, address string) []PortSignal {
	// Keyed by port name and number: the Service's port named after the
	// service forwards to the declared port, which is what an endpoint
	// must serve; a slice still listing the old number of a changed port
	// does not count.
	type portKey struct {
		name string
		port int32
	}
	ready := map[portKey]map[string]bool{}
	for _, slice := range slices {
		for _, p := range slice.Ports {
			if p.Name == nil || p.Port == nil {
				continue
			}
			key := portKey{*p.Name, *p.Port}
			for _, e := range slice.Endpoints {
				// A nil ready condition means unknown, which consumers
				// should read as ready (the EndpointSlice API).
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				if ready[key] == nil {
					ready[key] = map[string]bool{}
				}
				for _, addr := range e.Addresses {
					ready[key][addr] = true
				}
			}
		}
	}
	out := make([]PortSignal, len(qn.Spec.Services))
	for i, svc := range qn.Spec.Services {
		s := PortSignal{Name: svc.Name, Port: svc.Port, ReadyEndpoints: len(ready[portKey{svc.Name, svc.Port}]), ProbeFailures: -1,
			ProbeTarget: net.JoinHostPort(address, strconv.Itoa(int(svc.Port)))}
		if r, ok := probes[svc.Name]; ok && r.Port == svc.Port {
			s.ProbeFailures, s.ProbeError = r.Failures, r.Error
		}
		out[i] = s
	}
	return out
}
