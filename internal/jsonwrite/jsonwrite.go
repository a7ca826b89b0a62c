// Package jsonwrite appends JSON as encoding/json and slog's JSON handler
// write it, byte for byte, without their reflection: the webhook's answers
// and its decision lines are written on every request (each about 3 % of
// a validate request's CPU through encoding/json).
package jsonwrite

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// Quoting is one of the ways a string is quoted in what we write.
type Quoting uint8

const (
	// JSON is json.Marshal's: <, > and & escaped for HTML.
	JSON Quoting = iota
	// JSONNoHTML is a json.Encoder's with SetEscapeHTML(false).
	JSONNoHTML
	// Slog is slog's JSON handler's for string values: as JSONNoHTML, but
	// \b and \f as \u0008 and \u000c.
	Slog
)

// Object writes one JSON object's members, its keys and strings quoted as
// Quote says (json.Marshal's by default), into Dst; End closes it.
type Object struct {
	Dst   []byte
	Quote Quoting
	some  bool
}

// Within is an object whose opening and first members dst already holds.
func Within(dst []byte, q Quoting) Object { return Object{Dst: dst, Quote: q, some: true} }

// Key starts a member named by one of the writers' constant names,
// letters only, which every quoting writes as they are: it is not scanned
// (25 scans were half the cost of a decision line). Any other name goes
// through AnyKey.
func (o *Object) Key(name string) {
	o.next()
	o.Dst = append(o.Dst, '"')
	o.Dst = append(o.Dst, name...)
	o.Dst = append(o.Dst, '"', ':')
}

// AnyKey starts a member whose name comes from data (an audit
// annotation's key), quoted.
func (o *Object) AnyKey(name string) {
	o.next()
	o.Dst = AppendString(o.Dst, name, o.Quote)
	o.Dst = append(o.Dst, ':')
}

func (o *Object) next() {
	if o.some {
		o.Dst = append(o.Dst, ',')
	} else {
		o.Dst = append(o.Dst, '{')
		o.some = true
	}
}

// StringField writes a string member, or nothing when it is empty and
// omitEmpty says so.
func (o *Object) StringField(name, value string, omitEmpty bool) {
	if omitEmpty && value == "" {
		return
	}
	o.Key(name)
	o.Dst = AppendString(o.Dst, value, o.Quote)
}

// Bool writes a boolean member.
func (o *Object) Bool(name string, v bool) {
	o.Key(name)
	o.Dst = strconv.AppendBool(o.Dst, v)
}

// Int writes an integer member.
func (o *Object) Int(name string, v int) {
	o.Key(name)
	o.Dst = strconv.AppendInt(o.Dst, int64(v), 10)
}

// Float writes v as json.Marshal does, which slog calls for a float64:
// 'f' form from 1e-6 to 1e21, 'e' form (with e-7, not e-07) outside it.
// NaN and infinities are not written by json.Marshal: callers give none.
func (o *Object) Float(name string, v float64) {
	o.Key(name)
	format := byte('f')
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	start := len(o.Dst)
	o.Dst = strconv.AppendFloat(o.Dst, v, format, -1, 64)
	if n := len(o.Dst) - start; format == 'e' && n >= 4 && o.Dst[len(o.Dst)-4] == 'e' && o.Dst[len(o.Dst)-3] == '-' && o.Dst[len(o.Dst)-2] == '0' {
		o.Dst[len(o.Dst)-2] = o.Dst[len(o.Dst)-1]
		o.Dst = o.Dst[:len(o.Dst)-1]
	}
}

// Strings writes a []string member as slog does for slog.Any: through a
// json.Encoder that leaves HTML alone; nil is null.
func (o *Object) Strings(name string, items []string) {
	o.Key(name)
	if items == nil {
		o.Dst = append(o.Dst, "null"...)
		return
	}
	o.Dst = append(o.Dst, '[')
	for i, s := range items {
		if i > 0 {
			o.Dst = append(o.Dst, ',')
		}
		o.Dst = AppendString(o.Dst, s, JSONNoHTML)
	}
	o.Dst = append(o.Dst, ']')
}

// End closes the object and returns what was written.
func (o *Object) End() []byte {
	if !o.some {
		return append(o.Dst, "{}"...)
	}
	return append(o.Dst, '}')
}

// AppendString quotes s: control characters as \n, \r, \t (and \b, \f
// but for Slog) or \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped, and <, > and & as \u003c, \u003e, \u0026 for JSON.
func AppendString(dst []byte, s string, q Quoting) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && (q != JSON || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch {
			case b == '\\' || b == '"':
				dst = append(dst, '\\', b)
			case b == '\b' && q != Slog:
				dst = append(dst, '\\', 'b')
			case b == '\f' && q != Slog:
				dst = append(dst, '\\', 'f')
			case b == '\n':
				dst = append(dst, '\\', 'n')
			case b == '\r':
				dst = append(dst, '\\', 'r')
			case b == '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
