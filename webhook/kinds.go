package webhook

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quantumnode/qn-admission/policies"
)

// ByKind routes a request to the Decider of its kind (request.kind's group
// and kind) and every other request to Default. The kind it routes on has
// already been checked against the request's resource and object
// (extractInput), so a request cannot pick its judge by naming another kind.
type ByKind struct {
	Default Decider
	Kinds   map[schema.GroupKind]Decider
}

// Validate implements Decider.
func (b ByKind) Validate(ctx context.Context, in *policies.Input) policies.Decision {
	return b.pick(in).Validate(ctx, in)
}

// Mutate implements Decider.
func (b ByKind) Mutate(ctx context.Context, in *policies.Input) policies.Decision {
	return b.pick(in).Mutate(ctx, in)
}

// ObjectReads is what any of the Deciders may read of the objects: the
// kind is known only once the review is decoded.
func (b ByKind) ObjectReads() *policies.ObjectReads {
	reads := b.Default.ObjectReads()
	for _, d := range b.Kinds {
		reads = policies.UnionObjectReads(reads, d.ObjectReads())
	}
	return reads
}

// ObjectReadsForKind is what the Decider of kind k may read of its
// objects.
func (b ByKind) ObjectReadsForKind(k policies.GroupVersionKind) *policies.ObjectReads {
	return b.pickKind(k).ObjectReadsForKind(k)
}

// Current is the Default Decider's policy set: its roles label the
// metrics.
func (b ByKind) Current() *policies.Set { return b.Default.Current() }

func (b ByKind) pick(in *policies.Input) Decider { return b.pickKind(in.Facts.Kind) }

func (b ByKind) pickKind(k policies.GroupVersionKind) Decider {
	if d, ok := b.Kinds[schema.GroupKind{Group: k.Group, Kind: k.Kind}]; ok {
		return d
	}
	return b.Default
}
