package policies

import (
	"bytes"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/internal/cowcache"
	"github.com/quantumnode/qn-admission/rego"
)

// ObjectReads is what of request.object and request.oldObject a decision
// may read as Rego values: what the policies of a set may read
// (rego.Compiled.InputReadsBelow), and what the webhook and the engine
// read of every object themselves (ContextObjectReads). The webhook
// decodes a review under it (internal/astjson.Projection): the members
// nobody reads, often most of an object (its managed fields, status and
// last-applied annotation), are checked as strictly as the rest but never
// become values. A nil *ObjectReads reads the objects whole.
type ObjectReads struct {
	Object, OldObject *astjson.Projection
	// review is the AdmissionReview body's projection: the objects as
	// above, and the envelope whole but for the members the webhook reads
	// from their bytes (envelopeFromBytes), its objects streamed.
	review *astjson.Projection
	// forKind, when set, gives the reads of one kind of request, which
	// may be narrower (ForKind); kinds keeps its answers.
	forKind func(GroupVersionKind) *ObjectReads
	kinds   cowcache.Cache[GroupVersionKind, *ObjectReads]
}

// envelopeFromBytes are the members of request whose values the webhook
// reads from their bytes rather than from Rego values: the kind and
// resource pairs, the same few in every request, which it decodes once
// per distinct value, and options, which it keeps as bytes. No policy
// reads them from the decoded review: the policies' input.request is
// built from the typed request.
var envelopeFromBytes = []string{"kind", "resource", "requestKind", "requestResource", "options"}

// contextObjectPaths are the members of each object read whatever the
// policies: apiVersion and kind (the webhook holds the object to
// request.kind), metadata.labels and metadata.annotations (input.context
// labels and annotations, and the qn-role annotation of the object and
// the stored object that picks the role).
var contextObjectPaths = [][]string{{"apiVersion"}, {"kind"}, {"metadata", "labels"}, {"metadata", "annotations"}}

// ContextObjectReads reads of the objects only what the webhook and the
// engine read themselves: a Decider whose policies read no object values
// (one that reads the raw bytes) declares it.
var ContextObjectReads = newObjectReads(astjson.Paths(contextObjectPaths...), astjson.Paths(contextObjectPaths...))

// The envelope's objects the webhook reads member by member
// (astjson.Streamed) into the typed review: the review, its request and
// the request's userInfo build no Rego value.
const (
	ReviewStream = iota + 1
	RequestStream
	UserInfoStream
)

func newObjectReads(object, oldObject *astjson.Projection) *ObjectReads {
	request := map[string]*astjson.Projection{"object": object, "oldObject": oldObject,
		"userInfo": astjson.Streamed(UserInfoStream, nil)}
	for _, name := range envelopeFromBytes {
		request[name] = astjson.Only(map[string]*astjson.Projection{})
	}
	return &ObjectReads{Object: object, OldObject: oldObject,
		review: astjson.Streamed(ReviewStream, map[string]*astjson.Projection{"request": astjson.Streamed(RequestStream, request)})}
}

// objectReadsOf is what a compiled set's decisions may read of the objects,
// for any kind of request and (ForKind) for each.
func objectReadsOf(c *rego.Compiled) *ObjectReads {
	r := objectReadsBelow(c.InputReadsBelow)
	r.forKind = func(k GroupVersionKind) *ObjectReads {
		kind := rego.Kind{Group: k.Group, Version: k.Version, Kind: k.Kind}
		return objectReadsBelow(func(path ...string) [][]string { return c.InputReadsBelowForKind(kind, path...) })
	}
	return r
}

// objectReadsBelow reads of each object what below gives under it, and
// what the webhook and the engine read themselves.
func objectReadsBelow(below func(path ...string) [][]string) *ObjectReads {
	of := func(field string) *astjson.Projection {
		return astjson.Paths(append(below("request", field), contextObjectPaths...)...)
	}
	return newObjectReads(of("object"), of("oldObject"))
}

// ForKind is what decisions may read of the objects of a request whose
// input.request.kind is k: r itself, or less where the policies gate
// rules on the kind (a Pod's spec, for a set whose rules on spec are
// QuantumNode rules: rego.Compiled.InputReadsBelowForKind). Each kind's
// answer is kept (up to cowcache.Size kinds at once).
func (r *ObjectReads) ForKind(k GroupVersionKind) *ObjectReads {
	if r == nil || r.forKind == nil {
		return r
	}
	if got, ok := r.kinds.Get(k); ok {
		return got
	}
	got := r.forKind(k)
	if got.Covers(r) {
		got = r // nothing left out for this kind
	}
	r.kinds.Add(k, got)
	return got
}

// Review is the projection an AdmissionReview body is decoded under
// (astjson.DecodeMembers); for nil reads, the objects whole.
func (r *ObjectReads) Review() *astjson.Projection {
	if r == nil {
		return wholeObjects.review
	}
	return r.review
}

// wholeObjects reads the objects whole, the envelope as ObjectReads does.
var wholeObjects = newObjectReads(nil, nil)

// Covers reports whether objects decoded under r hold everything q reads.
func (r *ObjectReads) Covers(q *ObjectReads) bool {
	if r == nil || r == q {
		return true
	}
	return q != nil && r.Object.Covers(q.Object) && r.OldObject.Covers(q.OldObject)
}

// UnionObjectReads reads what a or b reads: a or b itself when one covers
// the other.
func UnionObjectReads(a, b *ObjectReads) *ObjectReads {
	switch {
	case a.Covers(b):
		return a
	case b.Covers(a):
		return b
	}
	return newObjectReads(astjson.Union(a.Object, b.Object), astjson.Union(a.OldObject, b.OldObject))
}

// ObjectReads is what the set's decisions may read of the objects;
// everything (nil) when there is no set.
func (s *Set) ObjectReads() *ObjectReads {
	if s == nil {
		return nil
	}
	return s.objectReads
}

// ObjectReadsForKind is ObjectReads for requests of kind k (ForKind).
func (s *Set) ObjectReadsForKind(k GroupVersionKind) *ObjectReads {
	return s.ObjectReads().ForKind(k)
}

// ObjectReads is what the current set's decisions may read of the objects.
func (e *Engine) ObjectReads() *ObjectReads { return e.current.Load().ObjectReads() }

// ObjectReadsForKind is ObjectReads for requests of kind k (ForKind).
func (e *Engine) ObjectReadsForKind(k GroupVersionKind) *ObjectReads {
	return e.current.Load().ObjectReadsForKind(k)
}

// readableBy is in with objects a decision of set can read: in itself
// when they were decoded whole or under reads that cover the set's for
// the request's kind, and
// otherwise a copy with the objects decoded again, whole, from the
// request's bytes. That happens when the set changed between the decoding
// and the decision (a reload that reads more), or for a set that judges
// later (the shadow's candidate).
func (in *Input) readableBy(set *Set) (*Input, error) {
	var reads *ObjectReads
	if set != nil {
		reads = set.objectReads.ForKind(in.Facts.Kind)
	}
	if in.ObjectReads.Covers(reads) {
		return in, nil
	}
	return in.whole()
}

// whole is in with its objects' values whole.
func (in *Input) whole() (*Input, error) {
	if in.ObjectReads == nil {
		return in, nil
	}
	out := *in
	out.ObjectReads = nil
	var err error
	if out.ObjectValue, err = wholeValue("request.object", in.ObjectValue, in.Request.Object.Raw); err != nil {
		return nil, err
	}
	if out.OldObjectValue, err = wholeValue("request.oldObject", in.OldObjectValue, in.Request.OldObject.Raw); err != nil {
		return nil, err
	}
	return &out, nil
}

func wholeValue(field string, projected ast.Value, raw []byte) (ast.Value, error) {
	if projected == nil {
		return nil, nil
	}
	v, err := astjson.Decode(bytes.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("decode %s whole for policies: %w", field, err)
	}
	return v, nil
}
