package quantumnode

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
)

func TestThePhaseGaugeCountsEveryPhaseFromTheCache(t *testing.T) {
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	inPhase := func(name string, phase qnv1alpha1.Phase) client.Object {
		return quantumNode(func(q *qnv1alpha1.QuantumNode) { q.Name, q.Status.Phase = name, phase })
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		inPhase("a", qnv1alpha1.PhaseReady),
		inPhase("b", qnv1alpha1.PhaseReady),
		inPhase("c", qnv1alpha1.PhaseFailed),
		inPhase("d", ""),
	).Build()

	want := `
# HELP qn_controller_quantumnodes QuantumNodes by status.phase (None: no status yet), as this replica's cache sees them. Every replica reports it: aggregate with max, not sum.
# TYPE qn_controller_quantumnodes gauge
qn_controller_quantumnodes{phase="Failed"} 1
qn_controller_quantumnodes{phase="None"} 1
qn_controller_quantumnodes{phase="Pending"} 0
qn_controller_quantumnodes{phase="Progressing"} 0
qn_controller_quantumnodes{phase="Ready"} 2
`
	if err := testutil.CollectAndCompare(newPhaseCollector(reader), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(newPhaseCollector(reader)); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// failingReader is a cache that cannot answer.
type failingReader struct{ client.Reader }

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("cache not started")
}

func TestThePhaseGaugeFailsTheScrapeInsteadOfReportingZeros(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newPhaseCollector(failingReader{}))
	_, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "list QuantumNodes from the cache: cache not started") {
		t.Errorf("gather error = %v, want the cache's error: zeros would claim there are no QuantumNodes", err)
	}
}
