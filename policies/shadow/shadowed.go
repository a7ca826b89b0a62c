package shadow

import (
	"context"

	"github.com/quantumnode/qn-admission/internal/cowcache"
	"github.com/quantumnode/qn-admission/policies"
)

// Shadowed answers with Served and submits every answer to Shadow: a
// Decider for the webhook that serves one set and tries another.
type Shadowed struct {
	Served *policies.Engine
	Shadow *Shadow
}

// readsCache is what Shadowed.ObjectReads last answered, for the two sets
// it answered for.
type readsCache struct {
	served, candidate *policies.Set
	reads             *policies.ObjectReads
	// kinds keeps ObjectReadsForKind's unions for the two sets.
	kinds cowcache.Cache[policies.GroupVersionKind, *policies.ObjectReads]
}

// Validate implements webhook.Decider.
func (s Shadowed) Validate(ctx context.Context, in *policies.Input) policies.Decision {
	d := s.Served.Validate(ctx, in)
	s.Shadow.Submit(policies.PathValidate, in, d)
	return d
}

// Mutate implements webhook.Decider.
func (s Shadowed) Mutate(ctx context.Context, in *policies.Input) policies.Decision {
	d := s.Served.Mutate(ctx, in)
	s.Shadow.Submit(policies.PathMutate, in, d)
	return d
}

// ObjectReads is what either the served set or the candidate may read of
// the objects: the webhook decodes a request once for both. Should the
// candidate change before it judges the request, the engine decodes what
// more it reads itself, from the request's bytes (which Submit copies).
func (s Shadowed) ObjectReads() *policies.ObjectReads {
	served, candidate := s.Served.Current(), s.Shadow.candidate.Current()
	if r := s.Shadow.reads.Load(); r != nil && r.served == served && r.candidate == candidate {
		return r.reads
	}
	r := &readsCache{served: served, candidate: candidate, reads: served.ObjectReads()}
	if candidate != nil {
		r.reads = policies.UnionObjectReads(r.reads, candidate.ObjectReads())
	}
	s.Shadow.reads.Store(r)
	return r.reads
}

// ObjectReadsForKind is ObjectReads for requests of kind k: what either
// set may read of them (ObjectReads.ForKind).
func (s Shadowed) ObjectReadsForKind(k policies.GroupVersionKind) *policies.ObjectReads {
	s.ObjectReads() // the union for the current sets
	r := s.Shadow.reads.Load()
	if got, ok := r.kinds.Get(k); ok {
		return got
	}
	got := r.served.ObjectReadsForKind(k)
	if r.candidate != nil {
		got = policies.UnionObjectReads(got, r.candidate.ObjectReadsForKind(k))
	}
	r.kinds.Add(k, got)
	return got
}

// Current is the served set (the webhook labels metrics by its roles).
func (s Shadowed) Current() *policies.Set { return s.Served.Current() }
