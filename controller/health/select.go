package health

import (
	"cmp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// Selector is a policy with its compiled selector.
type Selector struct {
	Policy   *qnv1alpha1.QuantumNodeHealthPolicy
	selector labels.Selector
}

// Compile sorts policies by name and compiles their selectors; a policy
// whose selector does not compile selects nothing (its status says why).
func Compile(policies []qnv1alpha1.QuantumNodeHealthPolicy) []Selector {
	out := make([]Selector, 0, len(policies))
	for i := range policies {
		p := &policies[i]
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.Selector)
		if err != nil {
			sel = labels.Nothing()
		}
		out = append(out, Selector{Policy: p, selector: sel})
	}
	slices.SortFunc(out, func(a, b Selector) int { return cmp.Compare(a.Policy.Name, b.Policy.Name) })
	return out
}

// PolicyFor is the policy that applies to qn: the first by name whose
// selector matches its labels; nil when none does (report only).
func PolicyFor(qn *qnv1alpha1.QuantumNode, policies []Selector) *qnv1alpha1.QuantumNodeHealthPolicy {
	set := labels.Set(qn.Labels)
	for _, p := range policies {
		if p.Policy.DeletionTimestamp == nil && p.selector.Matches(set) {
			return p.Policy
		}
	}
	return nil
}
