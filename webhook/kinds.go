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
	reads := objectReadsOf(b.Default)
	for _, d := range b.Kinds {
		reads = policies.UnionObjectReads(reads, objectReadsOf(d))
	}
	return reads
}

func (b ByKind) pick(in *policies.Input) Decider {
	if d, ok := b.Kinds[schema.GroupKind{Group: in.Facts.Kind.Group, Kind: in.Facts.Kind.Kind}]; ok {
		return d
	}
	return b.Default
}
