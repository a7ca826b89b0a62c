package quantumnode

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// Two QuantumNodes created at the same moment claim one Node (as when both
// passed admission's qn.nodeclaim, each judged without the other): the
// later (same second: by namespace/name) is reported with NodeMatched
// False, reason NodeClaimed, naming the first, and one event; the first is
// untouched; when the first goes, the second takes the Node.
func TestALaterClaimOfAClaimedNodeIsReported(t *testing.T) {
	t.Parallel()
	h := startControlPlane(t)
	ns := h.namespace(t)
	worker := nodeName(t, "claimed")
	h.createNode(t, worker, "arm64", true, nil)
	var wg sync.WaitGroup
	created := make([]*qnv1alpha1.QuantumNode, 2)
	for i, name := range []string{"claim-a", "claim-b"} {
		wg.Go(func() {
			created[i] = h.createQuantumNode(t, ns, name, func(q *qnv1alpha1.QuantumNode) { q.Spec.NodeName = worker })
		})
	}
	wg.Wait()
	first, later := created[0], created[1]
	if claimedBefore(later, first) {
		first, later = later, first
	}
	got := h.waitForPhase(t, client.ObjectKeyFromObject(later), qnv1alpha1.PhaseFailed, qnv1alpha1.ReasonNodeClaimed)
	c := meta.FindStatusCondition(got.Status.Conditions, qnv1alpha1.ConditionNodeMatched)
	want := fmt.Sprintf("Node %s is already claimed by QuantumNode %s/%s, created earlier", worker, first.Namespace, first.Name)
	if c == nil || c.Reason != qnv1alpha1.ReasonNodeClaimed || !strings.Contains(c.Message, want) {
		t.Errorf("NodeMatched = %+v, want NodeClaimed saying %q", c, want)
	}
	eventually(t, "the duplicate claim's event", func() error {
		return h.hasEvent(later, corev1.EventTypeWarning, qnv1alpha1.EventDuplicateNodeClaim)
	})
	h.waitForPhase(t, client.ObjectKeyFromObject(first), qnv1alpha1.PhaseReady, qnv1alpha1.ReasonAllChecksPassed)

	if err := h.client.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the later claim to take the freed Node", func() error {
		qn := &qnv1alpha1.QuantumNode{}
		if err := h.client.Get(context.Background(), client.ObjectKeyFromObject(later), qn); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(qn.Status.Conditions, qnv1alpha1.ConditionNodeMatched); c == nil || c.Reason != qnv1alpha1.ReasonNodeFound {
			return fmt.Errorf("NodeMatched %+v", c)
		}
		return nil
	})
}
