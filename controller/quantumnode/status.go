package quantumnode

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// computeStatus returns the status qn should have given the Node it runs on
// and the Service that exposes it (either may be nil: not found). It is pure:
// the same inputs give the same status, and only a changed fact changes a
// condition's lastTransitionTime, which is set to now. Conditions of other
// types already in qn's status are kept.
func computeStatus(qn *qnv1alpha1.QuantumNode, node *corev1.Node, svc *corev1.Service, now metav1.Time) qnv1alpha1.QuantumNodeStatus {
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
		c.Reason = qnv1alpha1.ReasonNodeNotFound
		c.Message = fmt.Sprintf("no Node named %s", qn.Spec.NodeName)
	case node == nil:
		c.Reason = qnv1alpha1.ReasonNodeNotFound
		c.Message = fmt.Sprintf("no Node has label %s=%s; set spec.nodeName or label the Node", qnv1alpha1.NodeLabel, qn.Name)
	case node.Status.NodeInfo.Architecture == "":
		c.Reason = qnv1alpha1.ReasonNodeArchUnknown
		c.Message = fmt.Sprintf("node %s has not reported its architecture yet, spec asks %s", node.Name, want)
	case node.Status.NodeInfo.Architecture != string(want):
		c.Reason = qnv1alpha1.ReasonArchMismatch
		c.Message = fmt.Sprintf("node %s is %s, spec asks %s", node.Name, node.Status.NodeInfo.Architecture, want)
	default:
		c.Status = metav1.ConditionTrue
		c.Reason = qnv1alpha1.ReasonNodeFound
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
		c.Reason = qnv1alpha1.ReasonServiceMissing
		c.Message = fmt.Sprintf("Service %s does not exist yet", qn.Name)
	case !metav1.IsControlledBy(svc, qn):
		c.Reason = qnv1alpha1.ReasonServiceNotOwned
		c.Message = fmt.Sprintf("Service %s exists and is not controlled by this QuantumNode; delete or rename it", svc.Name)
	case !serviceMatches(qn, svc):
		c.Reason = qnv1alpha1.ReasonServiceOutOfDate
		c.Message = fmt.Sprintf("Service %s does not expose %s yet", svc.Name, portList(qn))
	default:
		c.Status = metav1.ConditionTrue
		c.Reason = qnv1alpha1.ReasonServiceExposed
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
	case nodeMatched.Reason == qnv1alpha1.ReasonArchMismatch:
		from(nodeMatched)
		return qnv1alpha1.PhaseFailed, ready
	case servicesReady.Reason == qnv1alpha1.ReasonServiceNotOwned, servicesReady.Reason == qnv1alpha1.ReasonServiceNameInvalid, servicesReady.Reason == qnv1alpha1.ReasonServicesClash:
		from(servicesReady)
		return qnv1alpha1.PhaseFailed, ready
	case nodeMatched.Reason == qnv1alpha1.ReasonNodeNotFound:
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
		ready.Reason = qnv1alpha1.ReasonNodeNotReady
		ready.Message = fmt.Sprintf("node %s is not Ready%s", node.Name, why)
		return qnv1alpha1.PhaseProgressing, ready
	}
	ready.Status = metav1.ConditionTrue
	ready.Reason = qnv1alpha1.ReasonAllChecksPassed
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
