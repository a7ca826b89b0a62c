package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// Condition reasons. They are part of the API: people and alerts match on
// them, so a reason is never renamed, only added.
const (
	// ReasonNodeFound: the Node exists and has the declared architecture.
	ReasonNodeFound = "NodeFound"
	// ReasonNodeNotFound: no Node carries spec.nodeName or the qn.dev/node label.
	ReasonNodeNotFound = "NodeNotFound"
	// ReasonArchMismatch: the Node runs another architecture than spec.hardware.arch.
	ReasonArchMismatch = "ArchMismatch"
	// ReasonNodeArchUnknown: the Node has not reported its architecture yet
	// (the kubelet fills status.nodeInfo after it registers).
	ReasonNodeArchUnknown = "NodeArchUnknown"
	// ReasonNodeNotReady: the Node matches but its Ready condition is not True.
	ReasonNodeNotReady = "NodeNotReady"

	// ReasonServiceExposed: the Service exposes every declared port.
	ReasonServiceExposed = "ServiceExposed"
	// ReasonServiceMissing: the Service does not exist (yet).
	ReasonServiceMissing = "ServiceMissing"
	// ReasonServiceOutOfDate: the Service exists but not in the declared shape.
	ReasonServiceOutOfDate = "ServiceOutOfDate"
	// ReasonServiceNotOwned: a Service of that name exists and belongs to
	// someone else; the controller never takes over what it did not create.
	ReasonServiceNotOwned = "ServiceNotOwned"
	// ReasonServiceNameInvalid: the QuantumNode's name is a valid object
	// name but not a valid Service name (a DNS-1035 label: at most 63
	// characters, no dots, starting with a letter).
	ReasonServiceNameInvalid = "ServiceNameInvalid"
	// ReasonServicesClash: two entries of spec.services share a name or a
	// port (possible when the admission webhook is not installed).
	ReasonServicesClash = "ServicesClash"

	// ReasonAllChecksPassed: the Node is matched and Ready, the Service exposed.
	ReasonAllChecksPassed = "AllChecksPassed"
)

// NodeLabel is the label that ties a Node to the QuantumNode of that name
// when spec.nodeName is empty.
const NodeLabel = "qn.dev/node"

// ComputeStatus returns the status qn should have given the Node it runs on
// and the Service that exposes it (either may be nil: not found). It is pure:
// the same inputs give the same status, and only a changed fact changes a
// condition's lastTransitionTime, which is set to now. Conditions of other
// types already in qn's status are kept.
func ComputeStatus(qn *qnv1alpha1.QuantumNode, node *corev1.Node, svc *corev1.Service, now metav1.Time) qnv1alpha1.QuantumNodeStatus {
	gen := qn.Generation
	nodeMatched := nodeMatchedCondition(qn, node)
	servicesReady := servicesReadyCondition(qn, svc)
	phase, ready := summarise(nodeMatched, servicesReady, node)

	status := *qn.Status.DeepCopy()
	status.Phase = phase
	status.ObservedGeneration = gen
	for _, c := range []metav1.Condition{nodeMatched, servicesReady, ready} {
		c.ObservedGeneration = gen
		c.LastTransitionTime = now
		meta.SetStatusCondition(&status.Conditions, c)
	}
	return status
}

func nodeMatchedCondition(qn *qnv1alpha1.QuantumNode, node *corev1.Node) metav1.Condition {
	c := metav1.Condition{Type: qnv1alpha1.ConditionNodeMatched, Status: metav1.ConditionFalse}
	want := qn.Spec.Hardware.Arch
	switch {
	case node == nil && qn.Spec.NodeName != "":
		c.Reason = ReasonNodeNotFound
		c.Message = fmt.Sprintf("no Node named %s", qn.Spec.NodeName)
	case node == nil:
		c.Reason = ReasonNodeNotFound
		c.Message = fmt.Sprintf("no Node has label %s=%s; set spec.nodeName or label the Node", NodeLabel, qn.Name)
	case node.Status.NodeInfo.Architecture == "":
		c.Reason = ReasonNodeArchUnknown
		c.Message = fmt.Sprintf("node %s has not reported its architecture yet, spec asks %s", node.Name, want)
	case node.Status.NodeInfo.Architecture != string(want):
		c.Reason = ReasonArchMismatch
		c.Message = fmt.Sprintf("node %s is %s, spec asks %s", node.Name, node.Status.NodeInfo.Architecture, want)
	default:
		c.Status = metav1.ConditionTrue
		c.Reason = ReasonNodeFound
		c.Message = fmt.Sprintf("node %s is %s, as the spec asks", node.Name, want)
	}
	return c
}

func servicesReadyCondition(qn *qnv1alpha1.QuantumNode, svc *corev1.Service) metav1.Condition {
	c := metav1.Condition{Type: qnv1alpha1.ConditionServicesReady, Status: metav1.ConditionFalse}
	problem, why := serviceProblem(qn)
	switch {
	case problem != "":
		c.Reason, c.Message = problem, why
	case svc == nil:
		c.Reason = ReasonServiceMissing
		c.Message = fmt.Sprintf("Service %s does not exist yet", qn.Name)
	case !metav1.IsControlledBy(svc, qn):
		c.Reason = ReasonServiceNotOwned
		c.Message = fmt.Sprintf("Service %s exists and is not controlled by this QuantumNode; delete or rename it", svc.Name)
	case !ServiceMatches(qn, svc):
		c.Reason = ReasonServiceOutOfDate
		c.Message = fmt.Sprintf("Service %s does not expose %s yet", svc.Name, portList(qn))
	default:
		c.Status = metav1.ConditionTrue
		c.Reason = ReasonServiceExposed
		c.Message = fmt.Sprintf("Service %s exposes %s", svc.Name, portList(qn))
	}
	return c
}

// summarise derives the phase and the Ready condition. The order of the
// cases is the order of importance: what needs a person (Failed) hides what
// waits for the world (Pending), which hides what is on its way
// (Progressing), so the Ready message always names the most useful fact.
func summarise(nodeMatched, servicesReady metav1.Condition, node *corev1.Node) (qnv1alpha1.Phase, metav1.Condition) {
	ready := metav1.Condition{Type: qnv1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	from := func(c metav1.Condition) { ready.Reason, ready.Message = c.Reason, c.Message }
	switch {
	case nodeMatched.Reason == ReasonArchMismatch:
		from(nodeMatched)
		return qnv1alpha1.PhaseFailed, ready
	case servicesReady.Reason == ReasonServiceNotOwned, servicesReady.Reason == ReasonServiceNameInvalid, servicesReady.Reason == ReasonServicesClash:
		from(servicesReady)
		return qnv1alpha1.PhaseFailed, ready
	case nodeMatched.Reason == ReasonNodeNotFound:
		from(nodeMatched)
		return qnv1alpha1.PhasePending, ready
	case nodeMatched.Status != metav1.ConditionTrue:
		from(nodeMatched)
		return qnv1alpha1.PhaseProgressing, ready
	case servicesReady.Status != metav1.ConditionTrue:
		from(servicesReady)
		return qnv1alpha1.PhaseProgressing, ready
	}
	if ok, why := nodeReady(node); !ok {
		ready.Reason = ReasonNodeNotReady
		ready.Message = fmt.Sprintf("node %s is not Ready%s", node.Name, why)
		return qnv1alpha1.PhaseProgressing, ready
	}
	ready.Status = metav1.ConditionTrue
	ready.Reason = ReasonAllChecksPassed
	ready.Message = fmt.Sprintf("node %s is Ready and %s", node.Name, servicesReady.Message)
	return qnv1alpha1.PhaseReady, ready
}

// nodeReady reports whether the Node's Ready condition is True and, when it
// is not, the kubelet's own reason and message so the person reading the
// QuantumNode need not go and look at the Node.
func nodeReady(node *corev1.Node) (bool, string) {
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return true, ""
		}
		switch {
		case c.Reason != "" && c.Message != "":
			return false, fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		case c.Reason != "":
			return false, fmt.Sprintf(" (%s)", c.Reason)
		}
		return false, fmt.Sprintf(" (Ready is %s)", c.Status)
	}
	return false, " (it reports no Ready condition)"
}
