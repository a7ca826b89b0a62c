package quantumnode

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

var (
	earlier = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	now     = metav1.NewTime(time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC))
)

// quantumNode is an arm64 QuantumNode edge-1 on worker-3 with two services.
func quantumNode(change ...func(*qnv1alpha1.QuantumNode)) *qnv1alpha1.QuantumNode {
	qn := &qnv1alpha1.QuantumNode{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: "lab", UID: types.UID("qn-uid"), Generation: 4},
		Spec: qnv1alpha1.QuantumNodeSpec{
			Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64},
			Services: []qnv1alpha1.Service{{Name: "metrics", Port: 8080}, {Name: "grpc", Port: 9090}},
			NodeName: "worker-3",
		},
	}
	for _, c := range change {
		c(qn)
	}
	return qn
}

// node is a Ready arm64 Node named worker-3.
func node(change ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-3"},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{Architecture: "arm64"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
		},
	}
	for _, c := range change {
		c(n)
	}
	return n
}

func notReady(reason, message string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: reason, Message: message}}
	}
}

// service is the Service qn should have, controlled by qn.
func service(qn *qnv1alpha1.QuantumNode, change ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name: qn.Name, Namespace: qn.Namespace,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: qnv1alpha1.GroupVersion.String(), Kind: qnv1alpha1.Kind,
			Name: qn.Name, UID: qn.UID, Controller: ptr.To(true),
		}},
	}}
	shapeService(qn, s)
	for _, c := range change {
		c(s)
	}
	return s
}

type wantCondition struct {
	status  metav1.ConditionStatus
	reason  string
	message string // a substring the message must contain
}

func TestComputeStatus(t *testing.T) {
	tests := map[string]struct {
		qn      *qnv1alpha1.QuantumNode
		node    *corev1.Node
		noSvc   bool
		svc     func(*corev1.Service)
		phase   qnv1alpha1.Phase
		matched wantCondition
		exposed wantCondition
		ready   wantCondition
	}{
		"a Ready Node of the declared architecture and the declared Service make it Ready": {
			qn: quantumNode(), node: node(),
			phase:   qnv1alpha1.PhaseReady,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, "node worker-3 is arm64, as the spec asks"},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, "Service edge-1 exposes grpc:9090, metrics:8080"},
			ready:   wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonAllChecksPassed, "node worker-3 is Ready and Service edge-1 exposes"},
		},
		"no Node of spec.nodeName leaves it Pending with NodeNotFound": {
			qn: quantumNode(), node: nil,
			phase:   qnv1alpha1.PhasePending,
			matched: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotFound, "no Node named worker-3"},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotFound, "no Node named worker-3"},
		},
		"without spec.nodeName the message says which label to put on a Node": {
			qn: quantumNode(func(q *qnv1alpha1.QuantumNode) { q.Spec.NodeName = "" }), node: nil,
			phase:   qnv1alpha1.PhasePending,
			matched: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotFound, "no Node has label qn.dev/node=edge-1; set spec.nodeName or label the Node"},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotFound, "qn.dev/node=edge-1"},
		},
		"a Node of another architecture fails it with ArchMismatch naming both": {
			qn: quantumNode(), node: node(func(n *corev1.Node) { n.Name = "edge-7"; n.Status.NodeInfo.Architecture = "amd64" }),
			phase:   qnv1alpha1.PhaseFailed,
			matched: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonArchMismatch, "node edge-7 is amd64, spec asks arm64"},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonArchMismatch, "node edge-7 is amd64, spec asks arm64"},
		},
		"a Node of another architecture fails it even when it is NotReady": {
			qn: quantumNode(), node: node(notReady("KubeletNotReady", "PLEG is not healthy"), func(n *corev1.Node) { n.Status.NodeInfo.Architecture = "amd64" }),
			phase:   qnv1alpha1.PhaseFailed,
			matched: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonArchMismatch, ""},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonArchMismatch, ""},
		},
		"a Node that has not reported its architecture keeps it Progressing": {
			qn: quantumNode(), node: node(func(n *corev1.Node) { n.Status.NodeInfo.Architecture = "" }),
			phase:   qnv1alpha1.PhaseProgressing,
			matched: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeArchUnknown, "node worker-3 has not reported its architecture yet, spec asks arm64"},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeArchUnknown, ""},
		},
		"a NotReady Node keeps it Progressing and passes on the kubelet's words": {
			qn: quantumNode(), node: node(notReady("KubeletNotReady", "container runtime is down")),
			phase:   qnv1alpha1.PhaseProgressing,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotReady, "node worker-3 is not Ready (KubeletNotReady: container runtime is down)"},
		},
		"a Node whose Ready condition is Unknown is not Ready": {
			qn: quantumNode(), node: node(func(n *corev1.Node) {
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
			}),
			phase:   qnv1alpha1.PhaseProgressing,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotReady, "node worker-3 is not Ready (Ready is Unknown)"},
		},
		"a Node without a Ready condition is not Ready": {
			qn: quantumNode(), node: node(func(n *corev1.Node) { n.Status.Conditions = nil }),
			phase:   qnv1alpha1.PhaseProgressing,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonServiceExposed, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotReady, "it reports no Ready condition"},
		},
		"a missing Service keeps it Progressing with ServiceMissing": {
			qn: quantumNode(), node: node(), noSvc: true,
			phase:   qnv1alpha1.PhaseProgressing,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceMissing, "Service edge-1 does not exist yet"},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceMissing, ""},
		},
		"a Service missing a declared port keeps it Progressing with ServiceOutOfDate": {
			qn: quantumNode(), node: node(), svc: func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:1] },
			phase:   qnv1alpha1.PhaseProgressing,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceOutOfDate, "Service edge-1 does not expose grpc:9090, metrics:8080 yet"},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceOutOfDate, ""},
		},
		"a Service of that name controlled by someone else fails it with ServiceNotOwned": {
			qn: quantumNode(), node: node(), svc: func(s *corev1.Service) { s.OwnerReferences = nil },
			phase:   qnv1alpha1.PhaseFailed,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceNotOwned, "not controlled by this QuantumNode; delete or rename it"},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceNotOwned, ""},
		},
		"a name that cannot name a Service fails it with ServiceNameInvalid": {
			qn: quantumNode(func(q *qnv1alpha1.QuantumNode) { q.Name = "edge.1" }), node: node(), noSvc: true,
			phase:   qnv1alpha1.PhaseFailed,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceNameInvalid, `the name "edge.1" cannot name a Service`},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceNameInvalid, "rename the QuantumNode"},
		},
		"two services sharing a port fail it with ServicesClash naming both entries": {
			qn: quantumNode(func(q *qnv1alpha1.QuantumNode) {
				q.Spec.Services = append(q.Spec.Services, qnv1alpha1.Service{Name: "admin", Port: 8080})
			}),
			node: node(), noSvc: true,
			phase:   qnv1alpha1.PhaseFailed,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServicesClash, "spec.services[0] and [2] both use port 8080"},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServicesClash, "each service needs its own name and port"},
		},
		"two services sharing a name fail it with ServicesClash": {
			qn: quantumNode(func(q *qnv1alpha1.QuantumNode) {
				q.Spec.Services = append(q.Spec.Services, qnv1alpha1.Service{Name: "grpc", Port: 9091})
			}),
			node: node(), noSvc: true,
			phase:   qnv1alpha1.PhaseFailed,
			matched: wantCondition{metav1.ConditionTrue, qnv1alpha1.ReasonNodeFound, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServicesClash, "spec.services[1] and [2] are both named grpc"},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServicesClash, ""},
		},
		"an architecture mismatch is named before a missing Node would be and before a missing Service": {
			qn: quantumNode(), node: node(func(n *corev1.Node) { n.Status.NodeInfo.Architecture = "amd64" }), noSvc: true,
			phase:   qnv1alpha1.PhaseFailed,
			matched: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonArchMismatch, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceMissing, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonArchMismatch, ""},
		},
		"a missing Node is named before a missing Service": {
			qn: quantumNode(), node: nil, noSvc: true,
			phase:   qnv1alpha1.PhasePending,
			matched: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotFound, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceMissing, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeNotFound, ""},
		},
		"an unready arch-unknown Node is named before a missing Service": {
			qn: quantumNode(), node: node(notReady("KubeletNotReady", ""), func(n *corev1.Node) { n.Status.NodeInfo.Architecture = "" }), noSvc: true,
			phase:   qnv1alpha1.PhaseProgressing,
			matched: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeArchUnknown, ""},
			exposed: wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonServiceMissing, ""},
			ready:   wantCondition{metav1.ConditionFalse, qnv1alpha1.ReasonNodeArchUnknown, ""},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var svc *corev1.Service
			if !tt.noSvc {
				svc = service(tt.qn)
				if tt.svc != nil {
					tt.svc(svc)
				}
			}
			got := computeStatus(tt.qn, tt.node, svc, now)
			if got.Phase != tt.phase {
				t.Errorf("phase = %s, want %s", got.Phase, tt.phase)
			}
			if got.ObservedGeneration != tt.qn.Generation {
				t.Errorf("observedGeneration = %d, want the generation %d", got.ObservedGeneration, tt.qn.Generation)
			}
			checkCondition(t, got, qnv1alpha1.ConditionNodeMatched, tt.matched, tt.qn.Generation)
			checkCondition(t, got, qnv1alpha1.ConditionServicesReady, tt.exposed, tt.qn.Generation)
			checkCondition(t, got, qnv1alpha1.ConditionReady, tt.ready, tt.qn.Generation)
			if len(got.Conditions) != 3 {
				t.Errorf("%d conditions, want NodeMatched, ServicesReady and Ready: %+v", len(got.Conditions), got.Conditions)
			}
		})
	}
}

func checkCondition(t *testing.T, status qnv1alpha1.QuantumNodeStatus, typ string, want wantCondition, gen int64) {
	t.Helper()
	c := meta.FindStatusCondition(status.Conditions, typ)
	if c == nil {
		t.Errorf("no %s condition in %+v", typ, status.Conditions)
		return
	}
	if c.Status != want.status || c.Reason != want.reason {
		t.Errorf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, want.status, want.reason)
	}
	if !strings.Contains(c.Message, want.message) {
		t.Errorf("%s message = %q, want it to contain %q", typ, c.Message, want.message)
	}
	if c.Message == "" {
		t.Errorf("%s has no message; every condition tells a person what it saw", typ)
	}
	if c.ObservedGeneration != gen {
		t.Errorf("%s observedGeneration = %d, want %d", typ, c.ObservedGeneration, gen)
	}
}

// withStatus returns qn carrying the status computeStatus gave it at time at.
func withStatus(qn *qnv1alpha1.QuantumNode, node *corev1.Node, svc *corev1.Service, at metav1.Time) *qnv1alpha1.QuantumNode {
	qn = qn.DeepCopy()
	qn.Status = computeStatus(qn, node, svc, at)
	return qn
}

func TestComputeStatusOverTime(t *testing.T) {
	ready := quantumNode()
	readyBefore := withStatus(ready, node(), service(ready), earlier)

	tests := map[string]func(t *testing.T){
		"the same facts give the same status, so the reconciler writes nothing": func(t *testing.T) {
			got := computeStatus(readyBefore, node(), service(readyBefore), now)
			if !equality.Semantic.DeepEqual(got, readyBefore.Status) {
				t.Errorf("status changed without a new fact:\n got %+v\nwant %+v", got, readyBefore.Status)
			}
		},
		"an unchanged condition keeps its lastTransitionTime when another one flips": func(t *testing.T) {
			got := computeStatus(readyBefore, node(notReady("KubeletNotReady", "")), service(readyBefore), now)
			if c := meta.FindStatusCondition(got.Conditions, qnv1alpha1.ConditionNodeMatched); !c.LastTransitionTime.Equal(&earlier) {
				t.Errorf("NodeMatched lastTransitionTime = %v, want it kept at %v", c.LastTransitionTime, earlier)
			}
			if c := meta.FindStatusCondition(got.Conditions, qnv1alpha1.ConditionReady); !c.LastTransitionTime.Equal(&now) {
				t.Errorf("Ready lastTransitionTime = %v, want the flip time %v", c.LastTransitionTime, now)
			}
		},
		"a new message with the same status keeps lastTransitionTime": func(t *testing.T) {
			pending := withStatus(ready, nil, service(ready), earlier)
			pending.Spec.NodeName = "worker-4"
			got := computeStatus(pending, nil, service(pending), now)
			c := meta.FindStatusCondition(got.Conditions, qnv1alpha1.ConditionNodeMatched)
			if c.Message != "no Node named worker-4" || !c.LastTransitionTime.Equal(&earlier) {
				t.Errorf("NodeMatched = %q at %v, want the new message and the old time %v", c.Message, c.LastTransitionTime, earlier)
			}
		},
		"a new generation is observed by the status and every condition": func(t *testing.T) {
			next := readyBefore.DeepCopy()
			next.Generation++
			got := computeStatus(next, node(), service(next), now)
			if got.ObservedGeneration != next.Generation {
				t.Errorf("observedGeneration = %d, want %d", got.ObservedGeneration, next.Generation)
			}
			for _, c := range got.Conditions {
				if c.ObservedGeneration != next.Generation {
					t.Errorf("%s observedGeneration = %d, want %d", c.Type, c.ObservedGeneration, next.Generation)
				}
				if !c.LastTransitionTime.Equal(&earlier) {
					t.Errorf("%s moved its lastTransitionTime on a generation bump alone", c.Type)
				}
			}
		},
		"conditions of other types, written by someone else, are kept": func(t *testing.T) {
			other := readyBefore.DeepCopy()
			other.Status.Conditions = append(other.Status.Conditions, metav1.Condition{
				Type: "Calibrated", Status: metav1.ConditionTrue, Reason: "Done", LastTransitionTime: earlier,
			})
			got := computeStatus(other, node(), service(other), now)
			if meta.FindStatusCondition(got.Conditions, "Calibrated") == nil {
				t.Errorf("the Calibrated condition was dropped: %+v", got.Conditions)
			}
		},
		"the input QuantumNode is not changed": func(t *testing.T) {
			in := readyBefore.DeepCopy()
			_ = computeStatus(in, nil, nil, now)
			if !equality.Semantic.DeepEqual(in, readyBefore) {
				t.Errorf("computeStatus changed its input")
			}
		},
	}
	for name, test := range tests {
		t.Run(name, test)
	}
}
