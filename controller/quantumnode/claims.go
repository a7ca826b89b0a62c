package quantumnode

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

// One Node backs one QuantumNode. Admission refuses a claim of a Node
// another QuantumNode claims (the qn.nodeclaim rule, reading the
// webhook's inventory), but it cannot be atomic: two creates at the same
// moment are each judged without the other and can both pass. The
// controller reports the later claim, level-triggered: the QuantumNode
// created later (by creation time, then namespace/name) whose
// spec.nodeName another one names gets NodeMatched False with reason
// NodeClaimed, phase Failed, and one event; when the earlier one goes, or
// either moves, the claim is judged again.

// earlierClaimant is the QuantumNode that claimed qn's Node first, or nil
// when qn is the first (or names no Node).
func (n nodes) earlierClaimant(ctx context.Context, qn *qnv1alpha1.QuantumNode) (*qnv1alpha1.QuantumNode, error) {
	if qn.Spec.NodeName == "" {
		return nil, nil
	}
	list := &qnv1alpha1.QuantumNodeList{}
	if err := n.client.List(ctx, list, client.MatchingFields{controller.NodeKeyIndex: "name:" + qn.Spec.NodeName}); err != nil {
		return nil, fmt.Errorf("list QuantumNodes naming Node %s: %w", qn.Spec.NodeName, err)
	}
	var first *qnv1alpha1.QuantumNode
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == qn.UID || other.Spec.NodeName != qn.Spec.NodeName || !other.DeletionTimestamp.IsZero() {
			continue
		}
		if claimedBefore(other, qn) && (first == nil || claimedBefore(other, first)) {
			first = other
		}
	}
	return first, nil
}

// claimedBefore orders claims: the earlier creation first, then by
// namespace/name, so two replicas of the controller agree.
func claimedBefore(a, b *qnv1alpha1.QuantumNode) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// markClaimed makes status say that claimant claimed qn's Node first.
func markClaimed(status *qnv1alpha1.QuantumNodeStatus, qn, claimant *qnv1alpha1.QuantumNode, now metav1.Time) {
	msg := fmt.Sprintf("Node %s is already claimed by QuantumNode %s/%s, created earlier; a Node backs one QuantumNode (name another Node, or delete one of them)",
		qn.Spec.NodeName, claimant.Namespace, claimant.Name)
	status.Phase = qnv1alpha1.PhaseFailed
	for _, t := range []string{qnv1alpha1.ConditionNodeMatched, qnv1alpha1.ConditionReady} {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: qnv1alpha1.ReasonNodeClaimed,
			Message: msg, ObservedGeneration: qn.Generation, LastTransitionTime: now})
	}
}

// wasClaimed says the stored status already reports the duplicate claim
// (so its event is not repeated at every reconcile).
func wasClaimed(qn *qnv1alpha1.QuantumNode, claimant *qnv1alpha1.QuantumNode) bool {
	c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionNodeMatched)
	return c != nil && c.Reason == qnv1alpha1.ReasonNodeClaimed && strings.Contains(c.Message, " "+claimant.Namespace+"/"+claimant.Name+",")
}

// reportClaim records the event of a newly found duplicate claim.
func (n nodes) reportClaim(qn, claimant *qnv1alpha1.QuantumNode) {
	if wasClaimed(qn, claimant) {
		return
	}
	n.recorder.Eventf(qn, claimant, corev1.EventTypeWarning, qnv1alpha1.EventDuplicateNodeClaim, "ClaimNode",
		"Node %s is already claimed by QuantumNode %s/%s, created earlier; a Node backs one QuantumNode", qn.Spec.NodeName, claimant.Namespace, claimant.Name)
}

// claimHandler maps a QuantumNode to the others naming the same Node, so
// a later claim is judged again when the earlier one is deleted or moves.
func claimHandler(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		qn, ok := obj.(*qnv1alpha1.QuantumNode)
		if !ok || qn.Spec.NodeName == "" {
			return nil
		}
		list := &qnv1alpha1.QuantumNodeList{}
		if err := c.List(ctx, list, client.MatchingFields{controller.NodeKeyIndex: "name:" + qn.Spec.NodeName}); err != nil {
			log.FromContext(ctx).Error(err, "list QuantumNodes naming the same Node", "node", qn.Spec.NodeName)
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if other := &list.Items[i]; other.UID != qn.UID {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(other)})
			}
		}
		return reqs
	})
}
