package v1alpha1_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

func sampleNode() *qnv1alpha1.QuantumNode {
	return &qnv1alpha1.QuantumNode{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: "lab", Labels: map[string]string{"zone": "a"}},
		Spec: qnv1alpha1.QuantumNodeSpec{
			Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64},
			Services: []qnv1alpha1.Service{{Name: "grpc", Port: 9090}, {Name: "metrics", Port: 8080}},
			NodeName: "worker-3",
		},
		Status: qnv1alpha1.QuantumNodeStatus{
			Phase:              qnv1alpha1.PhaseReady,
			ObservedGeneration: 2,
			Conditions: []metav1.Condition{{
				Type: qnv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AllServicesUp",
				LastTransitionTime: metav1.Now(),
			}},
		},
	}
}

func TestAddToSchemeRegistersBothKinds(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := qnv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		obj  runtime.Object
		kind string
	}{
		"a QuantumNode is known by its kind":     {obj: &qnv1alpha1.QuantumNode{}, kind: qnv1alpha1.Kind},
		"a QuantumNodeList is known by its kind": {obj: &qnv1alpha1.QuantumNodeList{}, kind: qnv1alpha1.ListKind},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			gvks, _, err := scheme.ObjectKinds(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			if want := qnv1alpha1.GroupVersion.WithKind(tt.kind); len(gvks) != 1 || gvks[0] != want {
				t.Errorf("kinds = %v, want [%v]", gvks, want)
			}
			obj, err := scheme.New(qnv1alpha1.GroupVersion.WithKind(tt.kind))
			if err != nil {
				t.Fatalf("the scheme cannot create a %s: %v", tt.kind, err)
			}
			if _, ok := obj.(metav1.Object); !ok && tt.kind == qnv1alpha1.Kind {
				t.Errorf("a new %s has no object metadata", tt.kind)
			}
		})
	}
	if qnv1alpha1.GroupVersionResource.String() != "qn.dev/v1alpha1, Resource=quantumnodes" {
		t.Errorf("GroupVersionResource = %v", qnv1alpha1.GroupVersionResource)
	}
	if got := qnv1alpha1.GroupResource(qnv1alpha1.Resource).String(); got != "quantumnodes.qn.dev" {
		t.Errorf("GroupResource = %q", got)
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	tests := map[string]func(*qnv1alpha1.QuantumNode){
		"changing a service of the copy leaves the original's": func(c *qnv1alpha1.QuantumNode) {
			c.Spec.Services[0].Port = 1
		},
		"appending a service to the copy leaves the original's list": func(c *qnv1alpha1.QuantumNode) {
			c.Spec.Services = append(c.Spec.Services, qnv1alpha1.Service{Name: "ssh", Port: 22})
		},
		"changing a condition of the copy leaves the original's": func(c *qnv1alpha1.QuantumNode) {
			c.Status.Conditions[0].Status = metav1.ConditionFalse
			c.Status.Conditions[0].LastTransitionTime.Time = c.Status.Conditions[0].LastTransitionTime.AddDate(1, 0, 0)
		},
		"changing a label of the copy leaves the original's": func(c *qnv1alpha1.QuantumNode) {
			c.Labels["zone"] = "b"
		},
		"changing scalars of the copy leaves the original's": func(c *qnv1alpha1.QuantumNode) {
			c.Spec.Hardware.Arch = qnv1alpha1.ArchAMD64
			c.Spec.NodeName = "worker-4"
			c.Status.Phase = qnv1alpha1.PhaseFailed
		},
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			orig := sampleNode()
			pristine := sampleNode()
			pristine.Status.Conditions[0].LastTransitionTime = orig.Status.Conditions[0].LastTransitionTime

			cp := orig.DeepCopy()
			if !equality.Semantic.DeepEqual(cp, orig) {
				t.Fatalf("the copy differs from the original before any change")
			}
			change(cp)
			if !equality.Semantic.DeepEqual(orig, pristine) {
				t.Errorf("the original changed with its copy:\n got %+v\nwant %+v", orig, pristine)
			}
		})
	}
}

func TestDeepCopyObject(t *testing.T) {
	t.Run("a QuantumNode copies to an equal QuantumNode", func(t *testing.T) {
		orig := sampleNode()
		cp, ok := orig.DeepCopyObject().(*qnv1alpha1.QuantumNode)
		if !ok {
			t.Fatalf("DeepCopyObject returned %T", orig.DeepCopyObject())
		}
		if cp == orig || !equality.Semantic.DeepEqual(cp, orig) {
			t.Errorf("want an equal, distinct object")
		}
	})
	t.Run("a list copies its items, not their addresses", func(t *testing.T) {
		list := &qnv1alpha1.QuantumNodeList{Items: []qnv1alpha1.QuantumNode{*sampleNode()}}
		cp, ok := list.DeepCopyObject().(*qnv1alpha1.QuantumNodeList)
		if !ok {
			t.Fatalf("DeepCopyObject returned %T", list.DeepCopyObject())
		}
		cp.Items[0].Spec.Services[0].Name = "changed"
		if list.Items[0].Spec.Services[0].Name != "grpc" {
			t.Errorf("the original list changed with its copy")
		}
	})
	t.Run("nil copies to nil", func(t *testing.T) {
		var qn *qnv1alpha1.QuantumNode
		if qn.DeepCopy() != nil || qn.DeepCopyObject() != nil {
			t.Errorf("want nil")
		}
	})
}
