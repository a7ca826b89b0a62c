package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// NodeKeyIndex indexes QuantumNodes by the Node key they look for, so a
// Node event finds its QuantumNodes in the cache without a scan, and a
// Reschedule finds whether a Node is taken. One index serves both ways of
// naming a Node; the prefixes keep them apart.
const NodeKeyIndex = "qn.dev/nodeKey"

// NodeKeyOf is the index function of NodeKeyIndex: "name:<spec.nodeName>"
// when the QuantumNode names its Node, else "label:<its own name>", the
// value a Node carries in qn.dev/node; and "name:<node>" of a Reschedule's
// binding.
func NodeKeyOf(obj client.Object) []string {
	qn, ok := obj.(*qnv1alpha1.QuantumNode)
	if !ok {
		return nil
	}
	var keys []string
	if qn.Spec.NodeName != "" {
		keys = append(keys, "name:"+qn.Spec.NodeName)
	} else {
		keys = append(keys, "label:"+qn.Name)
	}
	// A Reschedule's binding: the node now runs elsewhere.
	if b := qn.Status.Binding; b != nil && b.NodeName != qn.Spec.NodeName {
		keys = append(keys, "name:"+b.NodeName)
	}
	return keys
}

// QuantumNodeLabelIndex is the field index of Pods and ControllerRevisions
// by their qn.dev/quantumnode label, so a node's serving Pods and
// revisions are a lookup, not a pass over their namespace.
const QuantumNodeLabelIndex = "qn.dev/quantumnodeLabel"

// QuantumNodeLabelOf is the index function of QuantumNodeLabelIndex.
func QuantumNodeLabelOf(obj client.Object) []string {
	if v := obj.GetLabels()[qnv1alpha1.LabelQuantumNode]; v != "" {
		return []string{v}
	}
	return nil
}
