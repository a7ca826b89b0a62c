package quantumnode

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// nodes is the reconcile's step that finds the Kubernetes Node a
// QuantumNode runs on.
type nodes struct {
	client   client.Reader
	recorder events.EventRecorder
}

// find returns the Node the QuantumNode runs on, or nil when there is
// none: the Node named by spec.nodeName, else the one labelled
// qn.dev/node=<name>.
func (n nodes) find(ctx context.Context, qn *qnv1alpha1.QuantumNode) (*corev1.Node, error) {
	if node, err := n.bound(ctx, qn); node != nil || err != nil {
		return node, err
	}
	if qn.Spec.NodeName != "" {
		return n.get(ctx, qn.Spec.NodeName)
	}
	nodes := &corev1.NodeList{}
	if err := n.client.List(ctx, nodes, client.MatchingFields{nodeLabelIndex: qn.Name}); err != nil {
		return nil, fmt.Errorf("list Nodes labelled %s=%s: %w", qnv1alpha1.NodeLabel, qn.Name, err)
	}
	switch len(nodes.Items) {
	case 0:
		return nil, nil
	case 1:
		return &nodes.Items[0], nil
	}
	// Several: pick one the same way every time, so the status does not
	// flap between them, and say so where the owner will look.
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	names := make([]string, len(nodes.Items))
	for i := range nodes.Items {
		names[i] = nodes.Items[i].Name
	}
	n.recorder.Eventf(qn, nil, corev1.EventTypeWarning, qnv1alpha1.EventAmbiguousNode, "MatchNode",
		"Nodes %s all carry %s=%s; using %s. Label only one, or set spec.nodeName",
		strings.Join(names, ", "), qnv1alpha1.NodeLabel, qn.Name, names[0])
	return &nodes.Items[0], nil
}

// bound is the Node a Reschedule moved qn to (status.binding), or nil
// when there is none or it no longer holds: the binding holds while the
// spec still names the Node it named then and, for a node bound by label,
// while no third Node carries the label (the label may still be on its
// way from the old Node to the new one).
func (n nodes) bound(ctx context.Context, qn *qnv1alpha1.QuantumNode) (*corev1.Node, error) {
	b := qn.Status.Binding
	if b == nil || b.SpecNodeName != qn.Spec.NodeName {
		return nil, nil
	}
	if b.SpecNodeName == "" {
		nodes := &corev1.NodeList{}
		if err := n.client.List(ctx, nodes, client.MatchingFields{nodeLabelIndex: qn.Name}); err != nil {
			return nil, fmt.Errorf("list Nodes labelled %s=%s: %w", qnv1alpha1.NodeLabel, qn.Name, err)
		}
		for _, labelled := range nodes.Items {
			if labelled.Name != b.NodeName && labelled.Name != b.PreviousNodeName {
				return nil, nil
			}
		}
	}
	return n.get(ctx, b.NodeName)
}

// get reads a Node from the cache; nil when it does not exist.
func (n nodes) get(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	if err := n.client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read Node %s: %w", name, err)
	}
	return node, nil
}
