package quantumnode

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

func TestServiceMatches(t *testing.T) {
	qn := quantumNode()
	tests := map[string]struct {
		change func(*corev1.Service)
		want   bool
	}{
		"the shaped Service matches":                         {want: true},
		"ports in another order still match":                 {change: func(s *corev1.Service) { s.Spec.Ports[0], s.Spec.Ports[1] = s.Spec.Ports[1], s.Spec.Ports[0] }, want: true},
		"an empty type is the API server's ClusterIP":        {change: func(s *corev1.Service) { s.Spec.Type = "" }, want: true},
		"an empty protocol is the API server's TCP":          {change: func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "" }, want: true},
		"an allocated clusterIP is not the controller's":     {change: func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.7" }, want: true},
		"a label someone else added is not the controller's": {change: func(s *corev1.Service) { s.Labels["team"] = "edge" }, want: true},
		"a selector someone else added is not compared":      {change: func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "x"} }, want: true},
		"a changed port does not match":                      {change: func(s *corev1.Service) { s.Spec.Ports[0].Port = 1 }},
		"a changed targetPort does not match":                {change: func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http") }},
		"a renamed port does not match":                      {change: func(s *corev1.Service) { s.Spec.Ports[0].Name = "web" }},
		"a UDP port does not match":                          {change: func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolUDP }},
		"an extra port does not match": {change: func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "ssh", Port: 22, TargetPort: intstr.FromInt32(22), Protocol: corev1.ProtocolTCP})
		}},
		"a missing port does not match":             {change: func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[1:] }},
		"type NodePort does not match":              {change: func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }},
		"a removed managed-by label does not match": {change: func(s *corev1.Service) { delete(s.Labels, controller.LabelManagedBy) }},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			svc := service(qn)
			if tt.change != nil {
				tt.change(svc)
			}
			if got := serviceMatches(qn, svc); got != tt.want {
				t.Errorf("serviceMatches = %v, want %v for ports %+v", got, tt.want, svc.Spec.Ports)
			}
			if !tt.want {
				shapeService(qn, svc)
				if !serviceMatches(qn, svc) {
					t.Errorf("shapeService did not bring the Service back: %+v", svc.Spec)
				}
			}
		})
	}
}

func TestShapeServiceKeepsWhatItDoesNotDeclare(t *testing.T) {
	qn := quantumNode()
	svc := &corev1.Service{Spec: corev1.ServiceSpec{
		Type:         corev1.ServiceTypeNodePort,
		ClusterIP:    "10.0.0.7",
		Selector:     map[string]string{"app": "edge"},
		Ports:        []corev1.ServicePort{{Name: "web", Port: 80, NodePort: 30080}},
		ExternalName: "",
	}}
	svc.Labels = map[string]string{"team": "edge"}
	shapeService(qn, svc)

	want := []corev1.ServicePort{
		{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090, TargetPort: intstr.FromInt32(9090)},
		{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 8080, TargetPort: intstr.FromInt32(8080)},
	}
	if !equality.Semantic.DeepEqual(svc.Spec.Ports, want) {
		t.Errorf("ports = %+v, want %+v (sorted by name, node ports gone)", svc.Spec.Ports, want)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("type = %s, want ClusterIP", svc.Spec.Type)
	}
	if svc.Spec.ClusterIP != "10.0.0.7" || svc.Spec.Selector["app"] != "edge" || svc.Labels["team"] != "edge" {
		t.Errorf("fields the controller does not declare were changed: %+v %+v", svc.Labels, svc.Spec)
	}
	if svc.Labels[controller.LabelManagedBy] != controller.ManagerName || svc.Labels[qnv1alpha1.LabelQuantumNode] != qn.Name {
		t.Errorf("labels = %v, want the controller's labels", svc.Labels)
	}

	external := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}}
	shapeService(qn, external)
	if external.Spec.ExternalName != "" {
		t.Errorf("externalName = %q, want it cleared when the type goes back to ClusterIP", external.Spec.ExternalName)
	}
}

func TestServiceProblem(t *testing.T) {
	tests := map[string]struct {
		change     func(*qnv1alpha1.QuantumNode)
		wantReason string
	}{
		"a DNS-1035 name and distinct services make a Service": {},
		"a name with a dot cannot name a Service": {
			change: func(q *qnv1alpha1.QuantumNode) { q.Name = "edge.1" }, wantReason: qnv1alpha1.ReasonServiceNameInvalid,
		},
		"a name starting with a digit cannot name a Service": {
			change: func(q *qnv1alpha1.QuantumNode) { q.Name = "7-edge" }, wantReason: qnv1alpha1.ReasonServiceNameInvalid,
		},
		"a name of 64 characters cannot name a Service": {
			change:     func(q *qnv1alpha1.QuantumNode) { q.Name = strings.Repeat("e", 64) },
			wantReason: qnv1alpha1.ReasonServiceNameInvalid,
		},
		"two entries with one port clash": {
			change: func(q *qnv1alpha1.QuantumNode) {
				q.Spec.Services = []qnv1alpha1.Service{{Name: "a", Port: 1}, {Name: "b", Port: 1}}
			},
			wantReason: qnv1alpha1.ReasonServicesClash,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			qn := quantumNode()
			if tt.change != nil {
				tt.change(qn)
			}
			reason, message := serviceProblem(qn)
			if reason != tt.wantReason {
				t.Errorf("reason = %q (%s), want %q", reason, message, tt.wantReason)
			}
			if (reason == "") != (message == "") {
				t.Errorf("reason %q and message %q must come together", reason, message)
			}
		})
	}
}
