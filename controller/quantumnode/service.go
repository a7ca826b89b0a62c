package quantumnode

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

// services is the reconcile's step that keeps a node's Service.
type services struct {
	client   client.Client
	scheme   *runtime.Scheme
	recorder events.EventRecorder
}

// ensureService creates or restores the QuantumNode's Service and returns it
// as it now is; nil when it does not exist and cannot be created (the
// status says why). A Service of that name the QuantumNode does not control
// is returned untouched.
func (s services) ensure(ctx context.Context, qn *qnv1alpha1.QuantumNode) (*corev1.Service, error) {
	if reason, _ := serviceProblem(qn); reason != "" {
		return nil, nil
	}
	key := client.ObjectKey{Namespace: qn.Namespace, Name: qn.Name}
	svc := &corev1.Service{}
	err := s.client.Get(ctx, key, svc)
	switch {
	case apierrors.IsNotFound(err):
		svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: qn.Namespace, Name: qn.Name}}
		shapeService(qn, svc)
		if err := controllerutil.SetControllerReference(qn, svc, s.scheme); err != nil {
			return nil, fmt.Errorf("own Service %s: %w", key, err)
		}
		if err := s.client.Create(ctx, svc, client.FieldOwner(controller.ManagerName)); err != nil {
			// AlreadyExists means the cache lags behind; the retry sees it.
			return nil, fmt.Errorf("create Service %s: %w", key, err)
		}
		s.recorder.Eventf(qn, svc, corev1.EventTypeNormal, qnv1alpha1.EventServiceCreated, "CreateService",
			"created Service %s exposing %s", svc.Name, portList(qn))
		return svc, nil
	case err != nil:
		return nil, fmt.Errorf("read Service %s: %w", key, err)
	case !metav1.IsControlledBy(svc, qn):
		return svc, nil
	case serviceMatches(qn, svc):
		return svc, nil
	}
	svc = svc.DeepCopy() // the cache's copy is shared
	shapeService(qn, svc)
	if err := s.client.Update(ctx, svc, client.FieldOwner(controller.ManagerName)); err != nil {
		return nil, fmt.Errorf("restore Service %s to spec.services: %w", key, err)
	}
	s.recorder.Eventf(qn, svc, corev1.EventTypeNormal, qnv1alpha1.EventServiceUpdated, "UpdateService",
		"brought Service %s back to %s", svc.Name, portList(qn))
	return svc, nil
}

// serviceProblem says why no Service can be made for qn, as a condition
// reason and message, or returns "", "" when one can. Object names may be
// DNS subdomains (dots, 253 characters) while Service names must be
// DNS-1035 labels; and without the admission webhook nothing stops two
// entries of spec.services from sharing a name or a port, which the
// apiserver would refuse in a Service.
func serviceProblem(qn *qnv1alpha1.QuantumNode) (reason, message string) {
	if errs := validation.IsDNS1035Label(qn.Name); len(errs) > 0 {
		return qnv1alpha1.ReasonServiceNameInvalid, fmt.Sprintf("the name %q cannot name a Service: %s; rename the QuantumNode", qn.Name, strings.Join(errs, "; "))
	}
	names := map[string]int{}
	ports := map[int32]int{}
	var clashes []string
	for i, s := range qn.Spec.Services {
		if j, seen := names[s.Name]; seen {
			clashes = append(clashes, fmt.Sprintf("spec.services[%d] and [%d] are both named %s", j, i, s.Name))
		}
		if j, seen := ports[s.Port]; seen {
			clashes = append(clashes, fmt.Sprintf("spec.services[%d] and [%d] both use port %d", j, i, s.Port))
		}
		names[s.Name], ports[s.Port] = i, i
	}
	if len(clashes) > 0 {
		return qnv1alpha1.ReasonServicesClash, strings.Join(clashes, "; ") + "; each service needs its own name and port"
	}
	return "", ""
}

// desiredPorts is the Service's port list as spec.services declares it:
// one TCP port per entry, named after it, forwarding to the same port.
// Sorted by name so that the declared order does not matter.
func desiredPorts(qn *qnv1alpha1.QuantumNode) []corev1.ServicePort {
	ports := make([]corev1.ServicePort, 0, len(qn.Spec.Services))
	for _, s := range qn.Spec.Services {
		ports = append(ports, corev1.ServicePort{
			Name:       s.Name,
			Protocol:   corev1.ProtocolTCP,
			Port:       s.Port,
			TargetPort: intstr.FromInt32(s.Port),
		})
	}
	slices.SortFunc(ports, func(a, b corev1.ServicePort) int { return cmp.Compare(a.Name, b.Name) })
	return ports
}

// desiredLabels are the labels the controller owns on the Service, so that
// people and tools can find it (kubectl get svc -l
// qn.dev/quantumnode=edge-1); other labels a person adds are left alone.
func desiredLabels(qn *qnv1alpha1.QuantumNode) map[string]string {
	return map[string]string{controller.LabelManagedBy: controller.ManagerName, qnv1alpha1.LabelQuantumNode: qn.Name}
}

// serviceMatches reports whether svc has the declared shape: type ClusterIP,
// exactly the declared ports (in any order) and the controller's labels.
// Fields the controller does not declare (clusterIP, selector, annotations,
// other labels) are not compared, so the API server's defaults and other
// people's additions never cause a write.
func serviceMatches(qn *qnv1alpha1.QuantumNode, svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeClusterIP && svc.Spec.Type != "" {
		return false
	}
	for k, v := range desiredLabels(qn) {
		if svc.Labels[k] != v {
			return false
		}
	}
	want := desiredPorts(qn)
	if len(svc.Spec.Ports) != len(want) {
		return false
	}
	got := slices.Clone(svc.Spec.Ports)
	slices.SortFunc(got, func(a, b corev1.ServicePort) int { return cmp.Compare(a.Name, b.Name) })
	for i := range want {
		g := got[i]
		if g.Protocol == "" { // the API server defaults it to TCP
			g.Protocol = corev1.ProtocolTCP
		}
		if g.Name != want[i].Name || g.Protocol != want[i].Protocol || g.Port != want[i].Port || g.TargetPort != want[i].TargetPort {
			return false
		}
	}
	return true
}

// shapeService brings svc to the declared shape in place, keeping whatever
// the controller does not declare. Switching back from NodePort or
// LoadBalancer drops the node ports with the old port list; the API server
// clears the other type-dependent fields itself.
func shapeService(qn *qnv1alpha1.QuantumNode, svc *corev1.Service) {
	if svc.Labels == nil {
		svc.Labels = map[string]string{}
	}
	maps.Copy(svc.Labels, desiredLabels(qn))
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Spec.ExternalName = ""
	}
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.Ports = desiredPorts(qn)
}

// portList renders the declared services for messages: "grpc:9090, metrics:8080".
func portList(qn *qnv1alpha1.QuantumNode) string {
	parts := make([]string, 0, len(qn.Spec.Services))
	for _, p := range desiredPorts(qn) {
		parts = append(parts, p.Name+":"+strconv.Itoa(int(p.Port)))
	}
	return strings.Join(parts, ", ")
}
