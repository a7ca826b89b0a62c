// Package astjson decodes JSON straight into OPA's ast.Value, in one pass
// and strictly: a key repeated in an object is an error, as in
// sigs.k8s.io/json's strict mode.
//
// The values are exactly those of the document's JSON form as the API
// server writes it: decoding with sigs.k8s.io/json (integers kept as
// int64), encoding again with encoding/json and reading that with OPA. An
// integer that fits int64 keeps its digits, any other number goes through
// float64 and is written as encoding/json writes a float64 (1e7 reads as
// 10000000), and bytes that are not UTF-8 become U+FFFD. The engine's
// reference evaluation judges that JSON form, so policies see the same
// input, down to the digits json.marshal and sprintf print, whichever way
// a request was decoded (the fuzz targets hold it); ValueOf gives the same
// values from decoded Go objects. Skipping the Go maps saves a decode and
// a conversion per object on the request path.
package astjson

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/open-policy-agent/opa/v1/ast"
)

// MaxDepth bounds nesting, so no input can exhaust the stack; callers that
// budget their input (the webhook allows 100 levels) never reach it.
const MaxDepth = 10000

// DuplicateError lists every key that appears twice in one object, as
// JSON paths ("spec.services[0].name"), in the form sigs.k8s.io/json's
// strict mode reports them.
type DuplicateError struct {
	Paths []string
}

func (e *DuplicateError) Error() string {
	msgs := make([]string, len(e.Paths))
	for i, p := range e.Paths {
		msgs[i] = fmt.Sprintf("duplicate field %q", p)
	}
	return strings.Join(msgs, "; ")
}

// Decode parses one JSON value. A syntax error names its byte offset; a
// repeated key gives a *DuplicateError once the whole value is read.
func Decode(data []byte) (ast.Value, error) {
	d := newDecoder(data)
	defer d.free()
	return d.decode(nil)
}

func (d *decoder) decode(p *Projection) (ast.Value, error) {
	v, err := d.value(p)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos != len(d.data) {
		return nil, d.syntaxError("after the top-level value")
	}
	if len(d.duplicates) > 0 {
		return nil, &DuplicateError{Paths: d.duplicates}
	}
	return v, nil
}

type decoder struct {
	data []byte
	pos  int
	// maxDepth is the deepest a container may open (len(path) below it):
	// MaxDepth, or a caller's tighter budget (DecodeMembers).
	maxDepth int
	// terms and text are arenas: terms are handed out from a slab and
	// plain strings are copied into a shared buffer, a few allocations per
	// object instead of two or three per value. Bytes in text are never
	// written again once a string points at them.
	terms Terms
	text  []byte
	// path is the way from the top to the value being read: object keys
	// and array indices, kept only to name duplicates.
	path       []segment
	duplicates []string
	// items holds the members of the objects being read, innermost last.
	items [][2]*ast.Term
	// capture lists key paths whose values' bytes DecodeCapturing returns
	// in captured.
	capture  [][]string
	captured [][]byte
	// captureDepth is the longest capture path: a member deeper than it
	// (most of a document) is not looked up among them.
	captureDepth int
	// names holds the keys of the objects being skipped, innermost last,
	// to find a key repeated in an object no value is built for.
	names []string
	// elems holds the elements of the arrays being read, innermost last.
	elems []*ast.Term
	// members lists the members of streamed objects (Streamed).
	members []Member
	// The stacks above start in these, so a request's object of ordinary
	// depth and width grows none of them: each growth was an allocation.
	pathStart  [16]segment
	namesStart [32]string
	itemsStart [48][2]*ast.Term
	elemsStart [16]*ast.Term
	// A review's envelope streams about 20 members.
	membersStart [24]Member
}

// decoders keeps decoders between documents: a decoder's stacks are
// about 3 KB, a request's largest allocation after its values, and its
// arenas' unused ends serve the next document instead of being dropped
// with it (a term slab, a string slab and a text slab each, half used on
// average when a document ends).
var decoders = sync.Pool{New: func() any { return new(decoder) }}

// newDecoder is a decoder of data, its stacks in their starting arrays.
// Its caller frees it once it holds no more of the decoder's state than
// the values it decoded (those belong to the caller).
func newDecoder(data []byte) *decoder {
	d := decoders.Get().(*decoder)
	d.data = data
	d.path, d.names, d.items, d.elems = d.pathStart[:0], d.namesStart[:0], d.itemsStart[:0], d.elemsStart[:0]
	d.members = d.membersStart[:0]
	d.maxDepth = MaxDepth
	return d
}

// free returns d to the pool. What it handed out stays with its caller:
// the duplicates (in an error), the captured bytes, and every term,
// string and text written into the arenas, which are never written again
// (the next document appends past them). The stacks are cleared so they
// keep no value or document alive, and a stack that outgrew its starting
// array is dropped, so a large document's stacks are not kept.
func (d *decoder) free() {
	clear(d.pathStart[:])
	clear(d.namesStart[:])
	clear(d.itemsStart[:])
	clear(d.elemsStart[:])
	clear(d.membersStart[:])
	d.data, d.pos = nil, 0
	d.path, d.names, d.items, d.elems, d.members = nil, nil, nil, nil, nil
	d.duplicates, d.capture, d.captured, d.captureDepth = nil, nil, nil, 0
	decoders.Put(d)
}

// Member is a member of a streamed object (Streamed): the id of the
// object's projection, the member's key, and its value under the
// member's projection, or StreamedObject for an object streamed itself.
type Member struct {
	Object int
	Key    string
	Value  ast.Value
}

// StreamedObject holds a streamed object's place (Streamed): its members
// are in DecodeMembers' list.
var StreamedObject ast.Value = streamedObject{}

// streamedObject is a type of its own, so no JSON value equals it.
type streamedObject struct{ ast.Null }

// listedEmptyObject is the value DecodeMembers lists for a member of a
// streamed object that is an object its projection keeps none of: one
// value for all, which its readers never change.
var listedEmptyObject = ast.NewObject()

// DecodeMembers is DecodeProjected for a reader that takes objects member
// by member: the objects p streams (Streamed) build no value, and their
// kept members are listed in the order they are read, an object's members
// before its own place in its parent's list. top is StreamedObject when
// the document is an object streamed by p, and otherwise the document's
// value. The document is read and checked exactly as Decode reads it.
//
// read is given the result once the whole document is read and checked,
// and its error is DecodeMembers'. The list of members is the decoder's
// own and is reused once read returns; the values and captured bytes are
// the caller's.
//
// maxDepth bounds nesting as MaxDepth does for Decode (at most MaxDepth):
// a caller with a tighter budget of its own has it kept while the
// document is read, with no scan of its own before.
func DecodeMembers(data []byte, maxDepth int, p *Projection, read func(top ast.Value, members []Member, captured [][]byte) error, paths ...[]string) error {
	d := newDecoder(data)
	defer d.free()
	d.maxDepth = min(maxDepth, MaxDepth)
	d.captureAt(paths)
	top, err := d.decode(p)
	if err != nil {
		return err
	}
	return read(top, d.members, d.captured)
}

// DecodeCapturing is Decode that also returns the bytes of the values at
// the given paths of object keys (each a sub-slice of data, nil when the
// path is absent): a caller that needs a member both as a value and as
// JSON reads the input once.
func DecodeCapturing(data []byte, paths ...[]string) (ast.Value, [][]byte, error) {
	return DecodeProjected(data, nil, paths...)
}

// DecodeProjected is DecodeCapturing that builds values only for what p
// keeps (Projection): the rest is read and checked as Decode would, and
// left out of the value.
func DecodeProjected(data []byte, p *Projection, paths ...[]string) (ast.Value, [][]byte, error) {
	d := newDecoder(data)
	defer d.free()
	d.captureAt(paths)
	v, err := d.decode(p)
	if err != nil {
		return nil, nil, err
	}
	return v, d.captured, nil
}

// captureAt sets the paths whose values' bytes the decoding returns.
func (d *decoder) captureAt(paths [][]string) {
	d.capture, d.captured = paths, make([][]byte, len(paths))
	for _, p := range paths {
		d.captureDepth = max(d.captureDepth, len(p))
	}
}

// captureMember records the bytes from start to here when the member just
// read is at one of the capture paths.
func (d *decoder) captureMember(start int) {
	if len(d.path) > d.captureDepth {
		return
	}
	for i, p := range d.capture {
		if len(p) != len(d.path) {
			continue
		}
		match := true
		for j, seg := range d.path {
			if !seg.isKey || seg.key != p[j] {
				match = false
				break
			}
		}
		if match {
			d.captured[i] = d.data[start:d.pos:d.pos]
		}
	}
}

type segment struct {
	key   string
	index int
	isKey bool
}

var errTooDeep = fmt.Errorf("JSON is nested more than %d levels deep", MaxDepth)

// tooDeep is the error of a container opened past d.maxDepth levels.
func (d *decoder) tooDeep() error {
	if d.maxDepth == MaxDepth {
		return errTooDeep
	}
	return fmt.Errorf("JSON is nested more than %d levels deep (at offset %d)", d.maxDepth, d.pos)
}

func (d *decoder) syntaxError(where string) error {
	if d.pos >= len(d.data) {
		return fmt.Errorf("unexpected end of JSON input %s", where)
	}
	return fmt.Errorf("invalid character %q at offset %d %s", d.data[d.pos], d.pos, where)
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) value(p *Projection) (ast.Value, error) {
	d.skipSpace()
	if d.pos >= len(d.data) {
		return nil, d.syntaxError("looking for a value")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object(p)
	case c == '[':
		return d.array()
	case c == '"':
		s, err := d.string()
		if err != nil {
			return nil, err
		}
		return d.terms.String(s), nil
	case c == 't':
		return d.literal("true", ast.Boolean(true))
	case c == 'f':
		return d.literal("false", ast.Boolean(false))
	case c == 'n':
		return d.literal("null", ast.Null{})
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		return nil, d.syntaxError("looking for a value")
	}
}

func (d *decoder) literal(word string, v ast.Value) (ast.Value, error) {
	if len(d.data)-d.pos < len(word) || string(d.data[d.pos:d.pos+len(word)]) != word {
		return nil, d.syntaxError("in literal " + word)
	}
	d.pos += len(word)
	return v, nil
}

func (d *decoder) object(p *Projection) (ast.Value, error) {
	if len(d.path) >= d.maxDepth {
		return nil, d.tooDeep()
	}
	d.pos++ // {
	d.skipSpace()
	streamed := p != nil && p.stream != 0
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		if streamed {
			return StreamedObject, nil
		}
		return ast.NewObject(), nil
	}
	// The members are gathered on d.items and the object made at once:
	// ast.NewObject allocates its entries as one block, Insert one by one.
	start := len(d.items)
	var seen map[string]struct{} // for large objects; small ones compare
	left := false                // a member the projection leaves out
	for {
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.syntaxError("looking for an object key")
		}
		key, err := d.keyTerm()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.syntaxError("after an object key")
		}
		d.pos++
		name := string(key.Value.(ast.String))
		d.path = append(d.path, segment{key: name, isKey: true})
		d.skipSpace()
		valueStart := d.pos
		var v ast.Value
		if member, kept := p.Member(name); !kept {
			err = d.skip()
		} else if streamed && member.keepsNothing() && d.pos < len(d.data) && d.data[d.pos] == '{' {
			// An object kept with none of its members, listed for its
			// type alone (a reader that takes its bytes): checked as
			// skipped, and listed as one shared empty object.
			err = d.skip()
			v = listedEmptyObject
		} else {
			v, err = d.value(member)
		}
		if err != nil {
			return nil, err
		}
		if len(d.capture) > 0 {
			d.captureMember(valueStart)
		}
		d.path = d.path[:len(d.path)-1]
		switch {
		case d.seenKey(start, &seen, name):
			d.duplicates = append(d.duplicates, d.pathOf(name))
		case v == nil || streamed:
			// Left out or listed, but its key is kept until the object
			// ends, so a repeat of it is found as Decode finds one.
			if v != nil {
				d.members = append(d.members, Member{Object: p.stream, Key: name, Value: v})
			}
			d.items = append(d.items, [2]*ast.Term{key, nil})
			left = true
		default:
			d.items = append(d.items, [2]*ast.Term{key, d.term(v)})
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.syntaxError("in an object")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			if streamed {
				clear(d.items[start:])
				d.items = d.items[:start]
				return StreamedObject, nil
			}
			members := d.items[start:]
			if left {
				members = slices.DeleteFunc(members, func(m [2]*ast.Term) bool { return m[1] == nil })
			}
			obj := ast.NewObject(members...)
			clear(d.items[start:])
			d.items = d.items[:start]
			return obj, nil
		default:
			return nil, d.syntaxError("after an object value")
		}
	}
}

// seenKey reports whether the object whose members start at d.items[start]
// already has a member name (and records name as seen). Up to 16 members
// are compared one by one; past that a set is kept.
func (d *decoder) seenKey(start int, seen *map[string]struct{}, name string) bool {
	members := d.items[start:]
	if *seen == nil && len(members) < 16 {
		for _, m := range members {
			if string(m[0].Value.(ast.String)) == name {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*len(members))
		for _, m := range members {
			(*seen)[string(m[0].Value.(ast.String))] = struct{}{}
		}
	}
	if _, dup := (*seen)[name]; dup {
		return true
	}
	(*seen)[name] = struct{}{}
	return false
}

func (d *decoder) array() (ast.Value, error) {
	if len(d.path) >= d.maxDepth {
		return nil, d.tooDeep()
	}
	d.pos++ // [
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return ast.NewArray(), nil
	}
	// The elements are gathered on d.elems and copied out once the array
	// ends: one allocation of the exact length, instead of one per growth.
	start := len(d.elems)
	for i := 0; ; i++ {
		d.path = append(d.path, segment{index: i})
		v, err := d.value(nil)
		if err != nil {
			return nil, err
		}
		d.path = d.path[:len(d.path)-1]
		d.elems = append(d.elems, d.term(v))
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.syntaxError("in an array")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			terms := slices.Clone(d.elems[start:])
			clear(d.elems[start:])
			d.elems = d.elems[:start]
			return ast.NewArray(terms...), nil
		default:
			return nil, d.syntaxError("after an array element")
		}
	}
}

// pathOf writes the current path plus key the way sigs.k8s.io/json does:
// "a.b[0].c".
func (d *decoder) pathOf(key string) string {
	var b strings.Builder
	for _, s := range d.path {
		if s.isKey {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		} else {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		}
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(key)
	return b.String()
}

// keyTerm reads an object key, sharing one term per well-known key.
func (d *decoder) keyTerm() (*ast.Term, error) {
	if raw, ok := d.plainString(); ok {
		if t, known := knownKeys[string(raw)]; known {
			return t, nil
		}
		return d.term(d.terms.String(d.intern(raw))), nil
	}
	s, err := d.string()
	if err != nil {
		return nil, err
	}
	return d.term(d.terms.String(s)), nil
}

const (
	termSlab = 64
	textSlab = 1024
)

// term hands out a term from the slab.
func (d *decoder) term(v ast.Value) *ast.Term { return d.terms.New(v) }

// Terms hands out terms from slabs of 64: building a document of many
// small values allocates a slab now and then instead of a term per value.
// The zero value is ready to use; a slab lives as long as any of its terms.
type Terms struct {
	slab []ast.Term
	strs []ast.String
}

// String returns s as an ast.Value without the 16-byte box Go allocates
// when a string becomes an interface: the string header lives in a slab
// and the interface points at it, as the box would (TestStringValuesAre
// PlainStrings holds the layout to the runtime's).
func (t *Terms) String(s string) ast.Value {
	if s == "" {
		return ast.String("") // the zero value needs no box either
	}
	if len(t.strs) == cap(t.strs) {
		t.strs = make([]ast.String, 0, termSlab)
	}
	t.strs = append(t.strs, ast.String(s))
	var v ast.Value
	iv := (*ifaceWords)(unsafe.Pointer(&v))
	iv.tab, iv.data = stringValueTab, unsafe.Pointer(&t.strs[len(t.strs)-1])
	return v
}

// ifaceWords is the runtime's layout of a non-empty interface value.
type ifaceWords struct {
	tab, data unsafe.Pointer
}

// stringValueTab is the interface table of ast.String as an ast.Value.
var stringValueTab = func() unsafe.Pointer {
	var v ast.Value = ast.String("x")
	return (*ifaceWords)(unsafe.Pointer(&v)).tab
}()

// New returns a term holding v.
func (t *Terms) New(v ast.Value) *ast.Term {
	if len(t.slab) == cap(t.slab) {
		t.slab = make([]ast.Term, 0, termSlab)
	}
	t.slab = append(t.slab, ast.Term{Value: v})
	return &t.slab[len(t.slab)-1]
}

// intern copies raw into the text arena and returns it as a string that
// shares the arena's memory; long strings get their own allocation.
func (d *decoder) intern(raw []byte) string {
	room := d.textRoom(len(raw))
	return d.keepText(append(room, raw...), room)
}

// textRoom is where the next string's text of at most n bytes is written:
// the arena's free end, or an allocation of its own for a long string. Its
// capacity is n, so text that outgrew it would move out rather than run
// past the arena's end.
func (d *decoder) textRoom(n int) []byte {
	if n > textSlab/4 {
		return make([]byte, 0, n)
	}
	if cap(d.text)-len(d.text) < n {
		d.text = make([]byte, 0, textSlab)
	}
	return d.text[len(d.text) : len(d.text) : len(d.text)+n]
}

// keepText returns text, written into room, as a string sharing its
// memory, and moves the arena past it when it is in the arena. Bytes in
// text are never written again once a string points at them.
func (d *decoder) keepText(text, room []byte) string {
	if len(text) == 0 {
		return ""
	}
	if cap(room) <= textSlab/4 && unsafe.SliceData(text) == unsafe.SliceData(room) {
		d.text = d.text[:len(d.text)+len(text)]
	}
	return unsafe.String(unsafe.SliceData(text), len(text))
}

// plainString reads a string made only of printable ASCII without escapes
// (nearly every key and value in Kubernetes objects) and returns its
// bytes; otherwise it reads nothing and reports false.
func (d *decoder) plainString() ([]byte, bool) {
	for i := d.pos + 1; i < len(d.data); i++ {
		switch c := d.data[i]; {
		case c == '"':
			s := d.data[d.pos+1 : i]
			d.pos = i + 1
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// string reads a string; escapes and non-ASCII bytes mean what they mean
// to encoding/json (unquote.go).
func (d *decoder) string() (string, error) {
	if raw, ok := d.plainString(); ok {
		return d.intern(raw), nil
	}
	return d.escapedString()
}

var errNumberRange = errors.New("is out of range of a 64-bit float")

// number reads a JSON number. An integer that fits int64 keeps its digits
// (as int64 formatting would write them); any other goes through float64.
func (d *decoder) number() (ast.Value, error) {
	start := d.pos
	lit, integer, err := d.numberLiteral()
	if err != nil {
		return nil, err
	}
	if integer {
		if t := ast.InternedIntNumberTermFromString(string(lit)); t != nil {
			return t.Value, nil
		}
		if i, err := strconv.ParseInt(string(lit), 10, 64); err == nil {
			return ast.Number(strconv.FormatInt(i, 10)), nil
		}
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return nil, numberRangeError(lit, start)
	}
	return ast.Number(formatFloat(f)), nil
}

func numberRangeError(lit []byte, start int) error {
	return fmt.Errorf("number %s at offset %d %w", lit, start, errNumberRange)
}

// numberLiteral reads a JSON number's syntax: its bytes, and whether it is
// an integer (no fraction, no exponent).
func (d *decoder) numberLiteral() (lit []byte, integer bool, err error) {
	start := d.pos
	if d.data[d.pos] == '-' {
		d.pos++
	}
	integer = true
	if d.pos+1 < len(d.data) && d.data[d.pos] == '0' && isDigit(d.data[d.pos+1]) {
		return nil, false, d.syntaxError("in a number (a leading zero)")
	}
	if !d.digits() {
		return nil, false, d.syntaxError("in a number")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		integer = false
		d.pos++
		if !d.digits() {
			return nil, false, d.syntaxError("after a decimal point")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		integer = false
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if !d.digits() {
			return nil, false, d.syntaxError("in an exponent")
		}
	}
	return d.data[start:d.pos], integer, nil
}

// ValueOf converts a decoded JSON document (maps, slices, strings, bools,
// nil, int64 or float64 numbers, as sigs.k8s.io/json or unstructured
// objects hold them) to the value Decode gives for its JSON form.
// ast.InterfaceToValue would print a float64 as strconv's 'g' does (1e+07).
func ValueOf(x any) (ast.Value, error) {
	switch x := x.(type) {
	case map[string]any:
		items := make([][2]*ast.Term, 0, len(x))
		for k, v := range x {
			value, err := ValueOf(v)
			if err != nil {
				return nil, err
			}
			items = append(items, ast.Item(ast.StringTerm(k), ast.NewTerm(value)))
		}
		return ast.NewObject(items...), nil
	case []any:
		terms := make([]*ast.Term, len(x))
		for i, v := range x {
			value, err := ValueOf(v)
			if err != nil {
				return nil, err
			}
			terms[i] = ast.NewTerm(value)
		}
		return ast.NewArray(terms...), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("number %v has no JSON form", x)
		}
		return ast.Number(formatFloat(x)), nil
	}
	return ast.InterfaceToValue(x)
}

// formatFloat writes f as encoding/json does: the API server encodes a
// stored object's numbers that way before it sends them to a webhook, and
// the engine's evaluation must read the digits policies would see in that
// JSON form (json.marshal and sprintf print them), e.g. 10000000 for 1e7,
// not strconv's 1e+07.
func formatFloat(f float64) string {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b)
}

// digits reads one or more decimal digits.
func (d *decoder) digits() bool {
	start := d.pos
	for d.pos < len(d.data) && isDigit(d.data[d.pos]) {
		d.pos++
	}
	return d.pos > start
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// knownKeys shares one term for keys every Kubernetes object repeats, so
// reading them allocates nothing.
var knownKeys = func() map[string]*ast.Term {
	m := map[string]*ast.Term{}
	for _, k := range []string{
		"apiVersion", "kind", "metadata", "name", "namespace", "uid", "labels",
		"annotations", "spec", "status", "resourceVersion", "generation",
		"creationTimestamp", "deletionTimestamp", "managedFields", "manager",
		"operation", "time", "fieldsType", "fieldsV1", "finalizers",
		"ownerReferences", "generateName", "hardware", "arch", "services",
		"port", "conditions", "type", "reason", "message", "lastTransitionTime",
		"observedGeneration", "subresource", "containers", "image", "ports",
		"containerPort", "protocol", "f:metadata", "f:labels", "f:annotations",
		"f:spec", ".", "kubectl.kubernetes.io/last-applied-configuration",
		"topology.kubernetes.io/zone", "qn-role",
	} {
		m[k] = ast.StringTerm(k)
	}
	return m
}()
