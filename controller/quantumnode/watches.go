package quantumnode

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

// nodeLabelIndex indexes Nodes by their qn.dev/node label, so the Node a
// QuantumNode is bound to by label is a lookup, not a pass over every Node.
const nodeLabelIndex = "qn.dev/nodeLabel"

func nodeLabelOf(obj client.Object) []string {
	if v := obj.GetLabels()[qnv1alpha1.NodeLabel]; v != "" {
		return []string{v}
	}
	return nil
}

// nodeKeys are the keys of controller.NodeKeyIndex a Node answers to.
func nodeKeys(node client.Object) []string {
	keys := []string{"name:" + node.GetName()}
	if v := node.GetLabels()[qnv1alpha1.NodeLabel]; v != "" {
		keys = append(keys, "label:"+v)
	}
	return keys
}

// nodeHandler maps a Node to the QuantumNodes that name it or that its
// qn.dev/node label names, in every namespace. On an update the handler maps
// both the old and the new Node, so relabelling a Node also reconciles the
// QuantumNode it no longer matches.
func nodeHandler(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, node client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		for _, key := range nodeKeys(node) {
			list := &qnv1alpha1.QuantumNodeList{}
			if err := c.List(ctx, list, client.MatchingFields{controller.NodeKeyIndex: key}); err != nil {
				// The cache is in memory; this fails only while it stops.
				log.FromContext(ctx).Error(err, "list QuantumNodes for a Node event", "node", node.GetName())
				return nil
			}
			for i := range list.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return reqs
	})
}

// foreignServiceHandler maps a Service the controller does not own to the
// QuantumNode of the same name, whose status says the name is taken; when
// its owner deletes it, the QuantumNode gets its own Service at once. Owned
// Services reach the controller through Owns.
func foreignServiceHandler(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, svc client.Object) []reconcile.Request {
		qn := &qnv1alpha1.QuantumNode{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), qn); err != nil {
			if !apierrors.IsNotFound(err) {
				log.FromContext(ctx).Error(err, "read the QuantumNode of a Service event", "service", client.ObjectKeyFromObject(svc))
			}
			return nil
		}
		if metav1.IsControlledBy(svc, qn) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(qn)}}
	})
}

// nodeFactsChanged lets through Node updates that can change a QuantumNode's
// status: labels, architecture, the Ready condition. Kubelet heartbeats
// update Nodes all the time and change none of these.
func nodeFactsChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, okOld := e.ObjectOld.(*corev1.Node)
			newNode, okNew := e.ObjectNew.(*corev1.Node)
			if !okOld || !okNew {
				return true
			}
			return !maps.Equal(oldNode.Labels, newNode.Labels) ||
				oldNode.Status.NodeInfo.Architecture != newNode.Status.NodeInfo.Architecture ||
				readyFacts(oldNode) != readyFacts(newNode)
		},
	}
}

// readyFacts is the part of a Node's Ready condition the status reports;
// heartbeat and transition times are left out on purpose.
func readyFacts(node *corev1.Node) [3]string {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return [3]string{string(c.Status), c.Reason, c.Message}
		}
	}
	return [3]string{}
}
