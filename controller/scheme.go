package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// ManagerName is the field manager of every write qn-controller makes, the
// events' reporting controller, and the value of LabelManagedBy on what it
// creates.
const ManagerName = "qn-controller"

// LabelManagedBy names the controller that owns an object qn-controller
// created (Services, PolicyReports).
const LabelManagedBy = "app.kubernetes.io/managed-by"

// NewScheme returns a scheme with every type the controller reads or writes:
// the built-in kinds (Service, Node, Event, Pod, EndpointSlice,
// ControllerRevision) and the qn.dev kinds.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add built-in kinds to the scheme: %w", err)
	}
	if err := qnv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add %s to the scheme: %w", qnv1alpha1.GroupVersion, err)
	}
	return scheme, nil
}
