package quantumnode

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

func TestNodeKeysMeetTheIndex(t *testing.T) {
	tests := map[string]struct {
		qn    *qnv1alpha1.QuantumNode
		node  *corev1.Node
		meets bool
	}{
		"a Node meets the QuantumNode whose spec.nodeName names it": {
			qn: quantumNode(), node: node(), meets: true,
		},
		"a Node labelled with a QuantumNode's name meets it when spec.nodeName is empty": {
			qn: quantumNode(func(q *qnv1alpha1.QuantumNode) { q.Spec.NodeName = "" }),
			node: node(func(n *corev1.Node) {
				n.Name = "anything"
				n.Labels = map[string]string{qnv1alpha1.NodeLabel: "edge-1"}
			}),
			meets: true,
		},
		"the label does not count when spec.nodeName names another Node": {
			qn:   quantumNode(func(q *qnv1alpha1.QuantumNode) { q.Spec.NodeName = "worker-9" }),
			node: node(func(n *corev1.Node) { n.Labels = map[string]string{qnv1alpha1.NodeLabel: "edge-1"} }),
		},
		"a Node named like the QuantumNode but unlabelled does not meet it": {
			qn:   quantumNode(func(q *qnv1alpha1.QuantumNode) { q.Spec.NodeName = "" }),
			node: node(func(n *corev1.Node) { n.Name = "edge-1" }),
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			keys := controller.NodeKeyOf(tt.qn)
			if len(keys) != 1 {
				t.Fatalf("index keys = %v, want one", keys)
			}
			if got := slices.Contains(nodeKeys(tt.node), keys[0]); got != tt.meets {
				t.Errorf("node keys %v contain %q = %v, want %v", nodeKeys(tt.node), keys[0], got, tt.meets)
			}
		})
	}
}

func TestNodeFactsChanged(t *testing.T) {
	tests := map[string]struct {
		change func(*corev1.Node)
		want   bool
	}{
		"a heartbeat alone is ignored": {change: func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
			n.ResourceVersion = "2"
		}},
		"an image list change is ignored": {change: func(n *corev1.Node) {
			n.Status.Images = []corev1.ContainerImage{{Names: []string{"busybox"}}}
		}},
		"a Ready flip passes":            {change: notReady("KubeletNotReady", ""), want: true},
		"a new kubelet message passes":   {change: func(n *corev1.Node) { n.Status.Conditions[0].Message = "PLEG is healthy again" }, want: true},
		"a new architecture passes":      {change: func(n *corev1.Node) { n.Status.NodeInfo.Architecture = "amd64" }, want: true},
		"a new qn.dev/node label passes": {change: func(n *corev1.Node) { n.Labels = map[string]string{qnv1alpha1.NodeLabel: "edge-2"} }, want: true},
	}
	p := nodeFactsChanged()
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			old := node()
			updated := old.DeepCopy()
			tt.change(updated)
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: updated}); got != tt.want {
				t.Errorf("update passes = %v, want %v", got, tt.want)
			}
		})
	}
}
