package astjson

import (
	"strconv"
	"unsafe"
)

// The skipping reader: what a projection leaves out is read here, byte
// for byte as value reads it (the same syntax errors, nesting bound,
// duplicate keys named by path, string and number checks, and captures),
// but no value is built. FuzzProjectedDecodingAgrees holds the two equal.

// skip reads one JSON value and builds nothing.
func (d *decoder) skip() error {
	d.skipSpace()
	if d.pos >= len(d.data) {
		return d.syntaxError("looking for a value")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.skipObject()
	case c == '[':
		return d.skipArray()
	case c == '"':
		return d.skipString()
	case c == 't':
		_, err := d.literal("true", nil)
		return err
	case c == 'f':
		_, err := d.literal("false", nil)
		return err
	case c == 'n':
		_, err := d.literal("null", nil)
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return d.skipNumber()
	default:
		return d.syntaxError("looking for a value")
	}
}

func (d *decoder) skipObject() error {
	if len(d.path) >= d.maxDepth {
		return d.tooDeep()
	}
	d.pos++ // {
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return nil
	}
	start := len(d.names)
	var seen map[string]struct{}
	for {
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return d.syntaxError("looking for an object key")
		}
		name, err := d.skipKey()
		if err != nil {
			return err
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return d.syntaxError("after an object key")
		}
		d.pos++
		d.path = append(d.path, segment{key: name, isKey: true})
		d.skipSpace()
		valueStart := d.pos
		if err := d.skip(); err != nil {
			return err
		}
		if len(d.capture) > 0 {
			d.captureMember(valueStart)
		}
		d.path = d.path[:len(d.path)-1]
		if d.seenName(start, &seen, name) {
			d.duplicates = append(d.duplicates, d.pathOf(name))
		} else {
			d.names = append(d.names, name)
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return d.syntaxError("in an object")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			clear(d.names[start:])
			d.names = d.names[:start]
			return nil
		default:
			return d.syntaxError("after an object value")
		}
	}
}

// seenName is seenKey for the keys of an object being skipped.
func (d *decoder) seenName(start int, seen *map[string]struct{}, name string) bool {
	names := d.names[start:]
	if *seen == nil && len(names) < 16 {
		for _, n := range names {
			if n == name {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*len(names))
		for _, n := range names {
			(*seen)[n] = struct{}{}
		}
	}
	if _, dup := (*seen)[name]; dup {
		return true
	}
	(*seen)[name] = struct{}{}
	return false
}

// skipKey reads an object key. A plain one is returned as a view of the
// input, which is not written while it is read; an escaped one is decoded
// as string decodes it, since "a" and "\u0061" are the same key.
func (d *decoder) skipKey() (string, error) {
	if raw, ok := d.plainString(); ok {
		if len(raw) == 0 {
			return "", nil
		}
		return unsafe.String(&raw[0], len(raw)), nil
	}
	return d.string()
}

func (d *decoder) skipArray() error {
	if len(d.path) >= d.maxDepth {
		return d.tooDeep()
	}
	d.pos++ // [
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return nil
	}
	for i := 0; ; i++ {
		d.path = append(d.path, segment{index: i})
		if err := d.skip(); err != nil {
			return err
		}
		d.path = d.path[:len(d.path)-1]
		d.skipSpace()
		if d.pos >= len(d.data) {
			return d.syntaxError("in an array")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return nil
		default:
			return d.syntaxError("after an array element")
		}
	}
}

// skipString checks a string as string reads it, building nothing.
func (d *decoder) skipString() error {
	if _, ok := d.plainString(); ok {
		return nil
	}
	return d.skipEscapedString()
}

// skipNumber checks a number as number does: its syntax, and its range
// unless it is an integer of at most 18 digits, which fits int64.
func (d *decoder) skipNumber() error {
	start := d.pos
	lit, integer, err := d.numberLiteral()
	if err != nil {
		return err
	}
	if integer && len(lit) <= 18 {
		return nil
	}
	if _, err := strconv.ParseFloat(string(lit), 64); err != nil {
		return numberRangeError(lit, start)
	}
	return nil
}

// Find returns the bytes of the value at path (object keys) in data, or
// nil when data has none there that it could read: it reads up to that
// value and no further, checking what it reads as Decode does, so a
// caller can learn one member of a large document before decoding it (the
// webhook reads a review's request.kind to choose what to decode of its
// objects). A repeated key is not looked for: the first one is found, and
// decoding the whole document refuses it. What it skips may nest up to
// maxDepth levels (at most MaxDepth), as DecodeMembers reads it.
func Find(data []byte, maxDepth int, path ...string) []byte {
	d := newDecoder(data)
	defer d.free()
	d.maxDepth = min(maxDepth, MaxDepth)
	for _, key := range path {
		if !d.findMember(key) {
			return nil
		}
	}
	d.skipSpace()
	start := d.pos
	if d.skip() != nil {
		return nil
	}
	return d.data[start:d.pos:d.pos]
}

// findMember reads an object up to its member key, stopping before its
// value; false when the value read is not an object or has no such key.
func (d *decoder) findMember(key string) bool {
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != '{' {
		return false
	}
	d.pos++
	for {
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return false // also the end of an empty object
		}
		name, err := d.skipKey()
		if err != nil {
			return false
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return false
		}
		d.pos++
		if name == key {
			return true
		}
		if d.skip() != nil {
			return false
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ',' {
			return false
		}
		d.pos++
	}
}
