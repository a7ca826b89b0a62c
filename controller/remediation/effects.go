// Package remediation carries out the steps of the repair ladder that
// controller/health decides: Restart evicts a QuantumNode's serving Pods,
// Reschedule moves it to another Node, Rebuild recreates its owned objects
// (and, opted in, its Cluster API Machine). Every effect is idempotent: a
// step is recorded in status before it acts, and acting again on a retry
// finds its work done (Pods started before the step are the only ones
// evicted; a cordoned, tainted Node is left as it is).
//
// It also keeps the guards' books: the steps in flight per policy and the
// census of each policy's nodes.
package remediation

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

// Cluster API's annotations on a Node it manages, naming its Machine.
const (
	AnnotationMachine          = "cluster.x-k8s.io/machine"
	AnnotationClusterNamespace = "cluster.x-k8s.io/cluster-namespace"
)

// MachineGroupKind is Cluster API's Machine.
var MachineGroupKind = schema.GroupKind{Group: "cluster.x-k8s.io", Kind: "Machine"}

// Effects act on the cluster for the ladder.
type Effects struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// FieldManager names the writes.
	FieldManager string
}

// Report says what a step did, for its status message and event.
type Report struct {
	// Done describes what was done, as a sentence.
	Done string
	// Pending is set when part of the work could not be done yet (a
	// PodDisruptionBudget refused an eviction); the step stays in progress
	// and the next reconcile tries again.
	Pending string
	// Acted says something was changed (a retry of a step whose effects
	// are in place already changes nothing).
	Acted bool
}

// Message is the report as one sentence.
func (r Report) Message() string {
	if r.Pending == "" {
		return r.Done
	}
	return r.Done + "; " + r.Pending
}

// ServingPods are the Pods of qn's namespace labelled
// qn.dev/quantumnode=<name> on nodeName, started before before (zero:
// all), and not already terminating, by name.
func (e *Effects) ServingPods(ctx context.Context, qn *qnv1alpha1.QuantumNode, nodeName string, before time.Time) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := e.Client.List(ctx, pods, client.InNamespace(qn.Namespace), client.MatchingFields{controller.QuantumNodeLabelIndex: qn.Name}); err != nil {
		return nil, fmt.Errorf("list the Pods serving QuantumNode %s/%s: %w", qn.Namespace, qn.Name, err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName != nodeName || p.DeletionTimestamp != nil {
			continue
		}
		if !before.IsZero() && !p.CreationTimestamp.Time.Before(before) {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Evict asks the API server to evict each Pod (the Eviction API, so
// PodDisruptionBudgets hold); the owners recreate them. A refusal by a
// budget is reported as pending, not as an error.
func (e *Effects) Evict(ctx context.Context, pods []corev1.Pod) (evicted []string, refused []string, err error) {
	for i := range pods {
		p := &pods[i]
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}}
		err := e.Client.SubResource("eviction").Create(ctx, p, ev)
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or replaced by another Pod of the same name.
			evicted = append(evicted, p.Name)
		case apierrors.IsTooManyRequests(err):
			refused = append(refused, fmt.Sprintf("%s (%s)", p.Name, statusMessage(err)))
		default:
			return evicted, refused, fmt.Errorf("evict Pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return evicted, refused, nil
}

// Restart evicts the Pods serving qn on nodeName that started before the
// step did.
func (e *Effects) Restart(ctx context.Context, qn *qnv1alpha1.QuantumNode, nodeName string, startedAt time.Time) (Report, error) {
	pods, err := e.ServingPods(ctx, qn, nodeName, startedAt)
	if err != nil {
		return Report{}, err
	}
	evicted, refused, err := e.Evict(ctx, pods)
	if err != nil {
		return Report{}, err
	}
	r := Report{Done: fmt.Sprintf("evicted %s on node %s", podList(evicted), nodeName), Acted: len(evicted) > 0}
	if len(pods) == 0 {
		r.Done = fmt.Sprintf("no Pod labelled %s=%s runs on node %s (started before the step)", qnv1alpha1.LabelQuantumNode, qn.Name, nodeName)
	}
	if len(refused) > 0 {
		r.Pending = "a PodDisruptionBudget refused evicting " + strings.Join(refused, ", ") + "; retrying"
	}
	return r, nil
}

// PickNode chooses where Reschedule moves qn: a Node of pool, not from,
// Ready, schedulable, without the qn.dev/isolated taint, of qn's
// architecture and bound to no other QuantumNode (bound reports whether a
// Node is). The first by name, so replicas and retries agree. The second
// result says why none fits.
func (e *Effects) PickNode(ctx context.Context, qn *qnv1alpha1.QuantumNode, pool metav1.LabelSelector, from string, bound func(*corev1.Node) bool) (*corev1.Node, string, error) {
	sel, err := metav1.LabelSelectorAsSelector(&pool)
	if err != nil {
		return nil, "", fmt.Errorf("spec.remediation.reschedule.nodeSelector: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := e.Client.List(ctx, nodes, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, "", fmt.Errorf("list the Nodes of the pool %s: %w", sel, err)
	}
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	var skipped []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		why := ""
		switch {
		case n.Name == from:
			continue
		case !isReady(n):
			why = "not Ready"
		case n.Spec.Unschedulable:
			why = "cordoned"
		case hasTaint(n, qnv1alpha1.TaintIsolated):
			why = "isolated"
		case n.Status.NodeInfo.Architecture != string(qn.Spec.Hardware.Arch):
			why = "arch " + n.Status.NodeInfo.Architecture
		case bound != nil && bound(n):
			why = "bound to another QuantumNode"
		}
		if why == "" {
			return n, "", nil
		}
		skipped = append(skipped, n.Name+": "+why)
	}
	if len(skipped) == 0 {
		return nil, fmt.Sprintf("no other Node matches the pool %s", sel), nil
	}
	return nil, fmt.Sprintf("no Node of the pool %s fits (%s)", sel, strings.Join(skipped, "; ")), nil
}

// Isolate cordons node and taints it qn.dev/isolated:NoSchedule (the
// taint's value names the QuantumNode moved away), so nothing new lands on
// it until a person looks. Nothing is written when it is both already.
func (e *Effects) Isolate(ctx context.Context, name, qnName string) error {
	node := &corev1.Node{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // nothing to keep work away from
		}
		return fmt.Errorf("read Node %s: %w", name, err)
	}
	if node.Spec.Unschedulable && hasTaint(node, qnv1alpha1.TaintIsolated) {
		return nil
	}
	updated := node.DeepCopy()
	updated.Spec.Unschedulable = true
	if !hasTaint(updated, qnv1alpha1.TaintIsolated) {
		now := metav1.Now()
		updated.Spec.Taints = append(updated.Spec.Taints, corev1.Taint{Key: qnv1alpha1.TaintIsolated, Value: truncate(qnName, 63), Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now})
	}
	// The taint list is replaced whole by a merge patch: the optimistic
	// lock keeps a taint the node controller added meanwhile.
	patch := client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})
	if err := e.Client.Patch(ctx, updated, patch, client.FieldOwner(e.FieldManager)); err != nil {
		return fmt.Errorf("cordon and taint Node %s %s: %w", name, qnv1alpha1.TaintIsolated, err)
	}
	return nil
}

// MoveLabel moves qn.dev/node=<qn name> from one Node to another, for a
// QuantumNode bound by that label. The new Node is labelled first, so
// that a failure halfway leaves two labelled Nodes (the controller picks
// by name and warns) rather than none.
func (e *Effects) MoveLabel(ctx context.Context, qnName, from, to string) error {
	if err := e.setLabel(ctx, to, qnName); err != nil {
		return err
	}
	return e.setLabel(ctx, from, "")
}

func (e *Effects) setLabel(ctx context.Context, nodeName, value string) error {
	node := &corev1.Node{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
		if apierrors.IsNotFound(err) && value == "" {
			return nil
		}
		return fmt.Errorf("read Node %s: %w", nodeName, err)
	}
	if node.Labels[qnv1alpha1.NodeLabel] == value {
		return nil
	}
	updated := node.DeepCopy()
	if value == "" {
		delete(updated.Labels, qnv1alpha1.NodeLabel)
	} else {
		if updated.Labels == nil {
			updated.Labels = map[string]string{}
		}
		updated.Labels[qnv1alpha1.NodeLabel] = value
	}
	if err := e.Client.Patch(ctx, updated, client.MergeFrom(node), client.FieldOwner(e.FieldManager)); err != nil {
		return fmt.Errorf("set label %s=%q on Node %s: %w", qnv1alpha1.NodeLabel, value, nodeName, err)
	}
	return nil
}

// Rebuild deletes qn's Service if it predates the step (the reconciler
// creates it anew, from the spec alone) and, with deleteMachine, the
// Cluster API Machine behind node, so its owner builds a new one.
func (e *Effects) Rebuild(ctx context.Context, qn *qnv1alpha1.QuantumNode, node *corev1.Node, startedAt time.Time, deleteMachine bool) (Report, error) {
	var done []string
	svc := &corev1.Service{}
	err := e.Client.Get(ctx, client.ObjectKeyFromObject(qn), svc)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Report{}, fmt.Errorf("read Service %s/%s: %w", qn.Namespace, qn.Name, err)
	case metav1.IsControlledBy(svc, qn) && svc.CreationTimestamp.Time.Before(startedAt):
		if err := e.Client.Delete(ctx, svc, client.Preconditions{UID: &svc.UID}); err != nil && !apierrors.IsNotFound(err) {
			return Report{}, fmt.Errorf("delete Service %s/%s to rebuild it: %w", qn.Namespace, qn.Name, err)
		}
		done = append(done, "deleted Service "+svc.Name+" to recreate it from the spec")
	}
	if deleteMachine {
		msg, deleted, err := e.deleteMachine(ctx, node)
		if err != nil {
			return Report{Done: strings.Join(done, "; "), Acted: len(done) > 0}, err
		}
		if deleted {
			done = append(done, msg)
		}
	}
	if len(done) == 0 {
		return Report{Done: "the owned objects were recreated already"}, nil
	}
	return Report{Done: strings.Join(done, "; "), Acted: true}, nil
}

// deleteMachine deletes the Machine node names; deleted is false when
// there was none to delete (or it is being deleted already).
func (e *Effects) deleteMachine(ctx context.Context, node *corev1.Node) (string, bool, error) {
	if node == nil {
		return "no Node, so no Machine to delete", false, nil
	}
	name, ns := node.Annotations[AnnotationMachine], node.Annotations[AnnotationClusterNamespace]
	if name == "" || ns == "" {
		return fmt.Sprintf("Node %s names no Cluster API Machine (annotations %s, %s)", node.Name, AnnotationMachine, AnnotationClusterNamespace), false, nil
	}
	mapping, err := e.Client.RESTMapper().RESTMapping(MachineGroupKind)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return "", false, fmt.Errorf("node %s names Machine %s/%s, but the API server serves no %s", node.Name, ns, name, MachineGroupKind)
		}
		return "", false, fmt.Errorf("look up %s: %w", MachineGroupKind, err)
	}
	m := &unstructured.Unstructured{}
	m.SetGroupVersionKind(mapping.GroupVersionKind)
	m.SetNamespace(ns)
	m.SetName(name)
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("Machine %s/%s is gone already", ns, name), false, nil
		}
		return "", false, fmt.Errorf("read Machine %s/%s behind Node %s: %w", ns, name, node.Name, err)
	}
	if m.GetDeletionTimestamp() != nil {
		return fmt.Sprintf("Machine %s/%s is being deleted", ns, name), false, nil
	}
	uid := m.GetUID()
	if err := e.Client.Delete(ctx, m, client.Preconditions{UID: &uid}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("Machine %s/%s is gone already", ns, name), false, nil
		}
		return "", false, fmt.Errorf("delete Machine %s/%s behind Node %s: %w", ns, name, node.Name, err)
	}
	return fmt.Sprintf("deleted Machine %s/%s behind Node %s", ns, name, node.Name), true, nil
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func podList(names []string) string {
	switch len(names) {
	case 0:
		return "no Pod"
	case 1:
		return "Pod " + names[0]
	}
	return "Pods " + strings.Join(names, ", ")
}

func statusMessage(err error) string {
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Message != "" {
		return s.Status().Message
	}
	return err.Error()
}

// truncate cuts a taint value to a label value's length and characters.
func truncate(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= n {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-_.")
}
