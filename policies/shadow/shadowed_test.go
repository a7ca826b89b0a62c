package shadow

import (
	"testing"

	"github.com/quantumnode/qn-admission/policies"
)

// readsStatus refuses nodes whose stored status is Failed: it reads what
// servedPolicy does not.
const readsStatus = "package p\ndeny contains \"failed nodes are frozen\" if input.request.oldObject.status.phase == \"Failed\"\n"

// The webhook decodes a request once for the served set and the
// candidate: Shadowed reads what either reads, and keeps the union while
// the two sets stay.
func TestShadowedReadsWhatEitherSetReads(t *testing.T) {
	labels, status := loadSet(t, servedPolicy), loadSet(t, readsStatus)
	if labels.ObjectReads().Covers(status.ObjectReads()) {
		t.Fatalf("%v covers %v; the test needs a candidate that reads more", labels.ObjectReads().OldObject, status.ObjectReads().OldObject)
	}
	candidate := policies.NewEngine(status, policies.EngineOptions{})
	shadowed := Shadowed{Served: policies.NewEngine(labels, policies.EngineOptions{}), Shadow: New(candidate, Options{})}
	reads := shadowed.ObjectReads()
	if !reads.Covers(labels.ObjectReads()) || !reads.Covers(status.ObjectReads()) {
		t.Fatalf("shadowed reads %v / %v cover not both sets", reads.Object, reads.OldObject)
	}
	if again := shadowed.ObjectReads(); again != reads {
		t.Fatal("the union is computed again for the same sets")
	}
	candidate.Swap(labels)
	if got := shadowed.ObjectReads(); got.Covers(status.ObjectReads()) {
		t.Fatalf("after the candidate changed to the served set's policies, the shadow still reads %v", got.OldObject)
	}
	candidate.Swap(nil)
	if got := shadowed.ObjectReads(); got != labels.ObjectReads() {
		t.Fatalf("with no candidate loaded the shadow reads %v, want the served set's %v", got.OldObject, labels.ObjectReads().OldObject)
	}
}

// What a request of one kind is decoded for covers both sets' reads for
// that kind, and is kept.
func TestShadowedReadsForAKindCoverBothSets(t *testing.T) {
	served := loadSet(t, `package p
is_qn if input.request.kind.kind == "QuantumNode"
deny contains "no spec" if { is_qn; not input.request.object.spec.a }
deny contains "labelled deny" if input.context.labels.deny == "yes"
`)
	status := loadSet(t, "package p\ndeny contains \"failed\" if input.request.object.status.phase == \"Failed\"\n")
	pod := policies.GroupVersionKind{Version: "v1", Kind: "Pod"}
	podReads := served.ObjectReadsForKind(pod)
	if podReads == served.ObjectReads() {
		t.Fatalf("the served set reads %v of a Pod: the test needs less than of a QuantumNode", podReads.Object)
	}
	shadowed := Shadowed{Served: policies.NewEngine(served, policies.EngineOptions{}), Shadow: New(policies.NewEngine(status, policies.EngineOptions{}), Options{})}
	both := shadowed.ObjectReadsForKind(pod)
	if !both.Covers(podReads) || !both.Covers(status.ObjectReadsForKind(pod)) || shadowed.ObjectReadsForKind(pod) != both {
		t.Fatalf("the shadow's reads for a Pod %v cover not both sets', or are not kept", both.Object)
	}
}
