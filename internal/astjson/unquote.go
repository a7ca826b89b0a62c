package astjson

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Strings with escapes or bytes beyond ASCII are read here rather than by
// encoding/json: nearly every object kubectl applies carries one (the
// last-applied-configuration annotation, a JSON document in a string), and
// json.Unmarshal scanned it twice and reflected into it. The rules are
// encoding/json's, so a document means the same whichever decoder reads it
// (FuzzDecodeAgreesWithTheReference and FuzzUnquoteMatchesEncodingJSON):
//
//   - a byte below 0x20 is refused, and an escape is one of \" \\ \/ \b
//     \f \n \r \t or \u and four hex digits;
//   - \u escapes of a UTF-16 surrogate pair make one rune, and a surrogate
//     that is not half of a pair becomes U+FFFD;
//   - bytes that are not UTF-8 become U+FFFD, one per byte that starts no
//     rune.

// escapedString reads the string at d.pos (its opening quote), which
// plainString refused, and returns its value; its text goes to the arena
// as plain strings' does.
func (d *decoder) escapedString() (string, error) {
	end, size, plain, err := d.scanString()
	if err != nil {
		return "", err
	}
	raw := d.data[d.pos+1 : end]
	d.pos = end + 1
	if plain {
		return d.intern(raw), nil
	}
	room := d.textRoom(size)
	return d.keepText(appendUnquoted(room, raw), room), nil
}

// skipEscapedString checks the string at d.pos as escapedString reads it,
// without building its value.
func (d *decoder) skipEscapedString() error {
	end, _, _, err := d.scanString()
	if err != nil {
		return err
	}
	d.pos = end + 1
	return nil
}

// scanString finds the closing quote of the string at d.pos and checks
// every byte and escape before it. size bounds the bytes of its value (a
// \u escape gives at most three, as does a byte that is not UTF-8:
// U+FFFD); plain says the value is the text itself (no escape, valid
// UTF-8). On an error d.pos is at the offending byte.
func (d *decoder) scanString() (end, size int, plain bool, err error) {
	plain = true
	for i := d.pos + 1; i < len(d.data); {
		switch c := d.data[i]; {
		case c == '"':
			return i, size, plain, nil
		case c < 0x20:
			d.pos = i
			return 0, 0, false, d.syntaxError("in a string")
		case c == '\\':
			plain = false
			if i+1 >= len(d.data) {
				d.pos = len(d.data)
				return 0, 0, false, d.syntaxError("in a string")
			}
			switch d.data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
				size++
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(d.data) {
						d.pos = len(d.data)
						return 0, 0, false, d.syntaxError("in a string's \\u escape")
					}
					if !isHex(d.data[k]) {
						d.pos = k
						return 0, 0, false, d.syntaxError("in a string's \\u escape")
					}
				}
				i += 6
				size += 3
			default:
				d.pos = i + 1
				return 0, 0, false, d.syntaxError("in a string escape")
			}
		case c < utf8.RuneSelf:
			i++
			size++
		default:
			r, n := utf8.DecodeRune(d.data[i:])
			if r == utf8.RuneError && n == 1 {
				plain = false
				size += 3
			} else {
				size += n
			}
			i += n
		}
	}
	d.pos = len(d.data)
	return 0, 0, false, d.syntaxError("in a string")
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// appendUnquoted appends the value of raw, the checked text between a
// string's quotes, to dst.
func appendUnquoted(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch e := raw[i+1]; e {
			case 'b':
				dst, i = append(dst, '\b'), i+2
			case 'f':
				dst, i = append(dst, '\f'), i+2
			case 'n':
				dst, i = append(dst, '\n'), i+2
			case 'r':
				dst, i = append(dst, '\r'), i+2
			case 't':
				dst, i = append(dst, '\t'), i+2
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					// Half of a pair: one rune with the \u escape that
					// follows when that is the other half, U+FFFD alone.
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if pair := utf16.DecodeRune(r, hex4(raw[i+2:])); pair != unicode.ReplacementChar {
							dst, i = utf8.AppendRune(dst, pair), i+6
							continue
						}
					}
					r = unicode.ReplacementChar
				}
				dst = utf8.AppendRune(dst, r)
			default: // " \ /
				dst, i = append(dst, e), i+2
			}
		case c < utf8.RuneSelf:
			dst, i = append(dst, c), i+1
		default:
			r, n := utf8.DecodeRune(raw[i:])
			dst, i = utf8.AppendRune(dst, r), i+n
		}
	}
	return dst
}

// hex4 is the value of four hex digits that scanString checked.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
