package astjson

import (
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Projection names the members of a JSON document a reader needs as
// values. Decoding under a projection builds no value for any other
// member, but still reads and checks every byte of it exactly as Decode
// does (syntax, string escapes, duplicate keys, nesting, a number's
// range): a document is accepted or refused alike, and the members kept
// are the values Decode gives. A projection describes objects only: a
// value of any other type where it names members is kept whole.
//
// A nil *Projection keeps the whole value.
type Projection struct {
	// members are the members named, each under its own projection.
	members map[string]*Projection
	// others says the members not named are kept whole; otherwise they
	// are left out.
	others bool
	// stream, when not 0, is the id under which the object's members are
	// handed to DecodeMembers' list instead of becoming an object
	// (Streamed).
	stream int
}

// Only keeps just the named members of an object, each under its own
// projection (nil: the member whole).
func Only(members map[string]*Projection) *Projection {
	return &Projection{members: members}
}

// Every keeps every member of an object, the named ones under their own
// projections.
func Every(members map[string]*Projection) *Projection {
	return &Projection{members: members, others: true}
}

// Streamed keeps every member of an object, the named ones under their
// own projections, as Every does, but builds no object of them: for a
// reader that takes the members one by one (DecodeMembers), each kept
// member is listed under id (1 or more) as it is read. The object's own
// place holds StreamedObject. A streamed projection is the top one or a
// member's of another streamed projection: an object value never holds
// StreamedObject.
func Streamed(id int, members map[string]*Projection) *Projection {
	if id < 1 {
		panic("astjson.Streamed: an id is 1 or more")
	}
	return &Projection{members: members, others: true, stream: id}
}

// Paths keeps the values at the given paths of object keys, whole, and
// nothing else; a path of no keys keeps everything (nil).
func Paths(paths ...[]string) *Projection {
	p := Only(map[string]*Projection{})
	for _, path := range paths {
		if len(path) == 0 {
			return nil
		}
		p.members[path[0]] = Union(p.child(path[0]), Paths(path[1:]))
	}
	return p
}

// child is the projection a named member is read under when it is named,
// and an empty Only when it is not: Paths grows it from there.
func (p *Projection) child(name string) *Projection {
	if c, ok := p.members[name]; ok {
		return c
	}
	return Only(map[string]*Projection{})
}

// Member says whether the member name of an object under p is kept, and
// under which projection.
func (p *Projection) Member(name string) (*Projection, bool) {
	if p == nil {
		return nil, true
	}
	if c, ok := p.members[name]; ok {
		return c, true
	}
	return nil, p.others
}

// keepsNothing reports whether p keeps no member of an object.
func (p *Projection) keepsNothing() bool {
	return p != nil && !p.others && len(p.members) == 0
}

// Covers reports whether everything q keeps, p keeps: a document decoded
// under p serves a reader that needs only q.
func (p *Projection) Covers(q *Projection) bool {
	if p == q || p == nil {
		return true
	}
	if q == nil || (q.others && !p.others) {
		return false
	}
	for name, qc := range q.members {
		pc, kept := p.Member(name)
		if !kept || !pc.Covers(qc) {
			return false
		}
	}
	if q.others {
		// q keeps the members it does not name whole.
		for name, pc := range p.members {
			if _, named := q.members[name]; !named && pc != nil {
				return false
			}
		}
	}
	return true
}

// Union keeps what p or q keeps. It returns p or q itself when one covers
// the other.
func Union(p, q *Projection) *Projection {
	if p.Covers(q) {
		return p
	}
	if q.Covers(p) {
		return q
	}
	u := &Projection{members: map[string]*Projection{}, others: p.others || q.others}
	for name := range p.members {
		u.members[name] = memberUnion(p, q, name)
	}
	for name := range q.members {
		u.members[name] = memberUnion(p, q, name)
	}
	return u
}

// memberUnion is the union of a member both keep or one keeps; p and q
// are not nil (Union returned before).
func memberUnion(p, q *Projection, name string) *Projection {
	pc, pKept := p.Member(name)
	qc, qKept := q.Member(name)
	switch {
	case pKept && qKept:
		return Union(pc, qc)
	case pKept:
		return pc
	}
	return qc
}

// Apply is v without what p leaves out: what DecodeProjected gives for a
// document Decode reads as v (FuzzProjectedDecodingAgrees holds them
// equal). Tests compare with it.
func (p *Projection) Apply(v ast.Value) ast.Value {
	obj, ok := v.(ast.Object)
	if !ok || p == nil {
		return v
	}
	out := ast.NewObject()
	obj.Foreach(func(k, val *ast.Term) {
		if member, kept := p.Member(string(k.Value.(ast.String))); kept {
			out.Insert(k, ast.NewTerm(member.Apply(val.Value)))
		}
	})
	return out
}

// String writes p for messages and tests: {a,b:{c},...} where ... stands
// for the members not named, kept whole; * is a whole value.
func (p *Projection) String() string {
	if p == nil {
		return "*"
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, name := range slices.Sorted(maps.Keys(p.members)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(name)
		if c := p.members[name]; c != nil {
			b.WriteByte(':')
			b.WriteString(c.String())
		}
	}
	if p.others {
		if len(p.members) > 0 {
			b.WriteByte(',')
		}
		b.WriteString("...")
	}
	b.WriteByte('}')
	return b.String()
}
