// Package clip bounds strings that a caller controls before they reach a
// log line, a metric or an answer, so an attacker cannot size our output.
// A clipped string keeps its head and says how much was cut.
package clip

import (
	"strconv"
	"unicode/utf8"
)

// The documented bounds (docs/reliability.md).
const (
	// FieldBytes bounds one caller-controlled field of a log line: user,
	// uid, role, namespace, name, a group, a window key.
	FieldBytes = 256
	// MessageBytes bounds one reason or warning, in a log line or an answer.
	MessageBytes = 1024
	// AnswerBytes bounds the whole status message of an AdmissionReview.
	AnswerBytes = 4096
	// ListItems bounds how many entries of a caller-controlled list
	// (groups, reasons, warnings) are kept.
	ListItems = 64
)

// String returns s if it fits in max bytes, else its longest head that fits
// and ends on a whole UTF-8 character, followed by a marker such as
// "…(+12345 bytes)" that counts the bytes cut.
func String(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return head(s, max)
}

// Bytes is String for bytes (a body, a line of a file), copying only the
// head it keeps.
func Bytes(b []byte, max int) string {
	if len(b) <= max {
		return string(b)
	}
	return head(b, max)
}

// head is s's longest head within max bytes that ends on a whole UTF-8
// character, and the marker counting the bytes cut.
func head[T string | []byte](s T, max int) string {
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return string(s[:cut]) + "…(+" + strconv.Itoa(len(s)-cut) + " bytes)"
}

// Middle is String for sentences: it keeps the head and the tail of s (a
// quarter of max) around the marker, so a message that quotes a huge value
// in its middle still says what was wrong and what to do.
func Middle(s string, max int) string {
	if len(s) <= max {
		return s
	}
	tail := max / 4
	start := len(s) - tail
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	head := max - tail
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	return s[:head] + "…(+" + strconv.Itoa(start-head) + " bytes)" + s[start:]
}

// Strings clips every entry to maxBytes (with Middle) and keeps at most maxItems of them;
// a last entry "…(+N more)" counts those dropped. It returns list itself
// when nothing needs clipping, so the common case allocates nothing.
func Strings(list []string, maxItems, maxBytes int) []string {
	fits := len(list) <= maxItems
	for i := 0; fits && i < len(list); i++ {
		fits = len(list[i]) <= maxBytes
	}
	if fits {
		return list
	}
	n := min(len(list), maxItems)
	out := make([]string, 0, n+1)
	for _, s := range list[:n] {
		out = append(out, Middle(s, maxBytes))
	}
	if dropped := len(list) - n; dropped > 0 {
		out = append(out, "…(+"+strconv.Itoa(dropped)+" more)")
	}
	return out
}
