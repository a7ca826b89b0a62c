package quantumnode

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

// newPhaseCollector serves qn_controller_quantumnodes{phase}.
func newPhaseCollector(reader client.Reader) *controller.CacheCounter {
	return controller.NewCacheCounter(reader, "qn_controller_quantumnodes",
		"QuantumNodes by status.phase (None: no status yet), as this replica's cache sees them. Every replica reports it: aggregate with max, not sum.",
		"phase", []string{string(qnv1alpha1.PhasePending), string(qnv1alpha1.PhaseProgressing), string(qnv1alpha1.PhaseReady), string(qnv1alpha1.PhaseFailed)},
		func(qn *qnv1alpha1.QuantumNode) string { return string(qn.Status.Phase) })
}
