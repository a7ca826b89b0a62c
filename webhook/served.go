package webhook

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies/scalerspec"
)

// Served is the Decider qn-webhook answers with: HorizontalQNScalers go to
// the PromQL check of their queries, every other kind to policy (the
// engine, or the engine with its shadow). qnctl eval asks the same
// Decider, so the CLI and the server cannot disagree on a kind.
func Served(policy Decider) ByKind {
	return ByKind{Default: policy, Kinds: map[schema.GroupKind]Decider{
		qnv1alpha1.ScalerGroupVersionKind.GroupKind(): scalerspec.Validator{},
	}}
}
