package webhook

import (
	"encoding/base64"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appendReview appends rev as json.Marshal writes it, byte for byte
// (TestAppendReviewIsJSONMarshal), for the reviews the webhook answers
// with: a response whose status carries at most a retry-after in its
// details. ok is false for any other review, which json.Marshal then
// writes. It saves encoding/json's reflection on every answer (about 3 %
// of a validate request's CPU).
func appendReview(dst []byte, rev *admissionv1.AdmissionReview) (out []byte, ok bool) {
	r := rev.Response
	if rev.Request != nil || r == nil || !plainStatus(r.Result) {
		return dst, false
	}
	o := jsonObject{dst: dst}
	o.stringField("kind", rev.Kind, true)
	o.stringField("apiVersion", rev.APIVersion, true)
	o.key("response")
	{
		ro := jsonObject{dst: o.dst}
		ro.stringField("uid", string(r.UID), false)
		ro.key("allowed")
		ro.dst = strconv.AppendBool(ro.dst, r.Allowed)
		if s := r.Result; s != nil {
			ro.key("status")
			so := jsonObject{dst: ro.dst}
			so.key("metadata")
			so.dst = append(so.dst, "{}"...)
			so.stringField("status", s.Status, true)
			so.stringField("message", s.Message, true)
			so.stringField("reason", string(s.Reason), true)
			if d := s.Details; d != nil {
				so.key("details")
				do := jsonObject{dst: so.dst}
				if d.RetryAfterSeconds != 0 {
					do.key("retryAfterSeconds")
					do.dst = strconv.AppendInt(do.dst, int64(d.RetryAfterSeconds), 10)
				}
				so.dst = do.end()
			}
			if s.Code != 0 {
				so.key("code")
				so.dst = strconv.AppendInt(so.dst, int64(s.Code), 10)
			}
			ro.dst = so.end()
		}
		if len(r.Patch) > 0 {
			ro.key("patch")
			ro.dst = append(ro.dst, '"')
			ro.dst = base64.StdEncoding.AppendEncode(ro.dst, r.Patch)
			ro.dst = append(ro.dst, '"')
		}
		if r.PatchType != nil {
			ro.key("patchType")
			ro.dst = appendJSONString(ro.dst, string(*r.PatchType))
		}
		if len(r.AuditAnnotations) > 0 {
			ro.key("auditAnnotations")
			ao := jsonObject{dst: ro.dst}
			keys := make([]string, 0, len(r.AuditAnnotations))
			for k := range r.AuditAnnotations {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				ao.anyKey(k)
				ao.dst = appendQuoted(ao.dst, r.AuditAnnotations[k], ao.quote)
			}
			ro.dst = ao.end()
		}
		if len(r.Warnings) > 0 {
			ro.key("warnings")
			ro.dst = append(ro.dst, '[')
			for i, w := range r.Warnings {
				if i > 0 {
					ro.dst = append(ro.dst, ',')
				}
				ro.dst = appendJSONString(ro.dst, w)
			}
			ro.dst = append(ro.dst, ']')
		}
		o.dst = ro.end()
	}
	return o.end(), true
}

// plainStatus reports whether s holds only what review sets: status,
// message, reason, code and a retry-after.
func plainStatus(s *metav1.Status) bool {
	if s == nil {
		return true
	}
	if s.TypeMeta != (metav1.TypeMeta{}) || !reflect.ValueOf(s.ListMeta).IsZero() {
		return false
	}
	d := s.Details
	return d == nil || d.Name == "" && d.Group == "" && d.Kind == "" && d.UID == "" && len(d.Causes) == 0
}

// jsonObject writes one JSON object's members, its keys and strings
// quoted as quote says (json.Marshal's by default); end closes it.
type jsonObject struct {
	dst   []byte
	some  bool
	quote quoting
}

// key starts a member named by one of the writers' constant names,
// letters only, which every quoting writes as they are: it is not scanned
// (25 scans were half the cost of a decision line). Any other name goes
// through anyKey.
func (o *jsonObject) key(name string) {
	o.next()
	o.dst = append(o.dst, '"')
	o.dst = append(o.dst, name...)
	o.dst = append(o.dst, '"', ':')
}

// anyKey starts a member whose name comes from data (an audit annotation's
// key), quoted.
func (o *jsonObject) anyKey(name string) {
	o.next()
	o.dst = appendQuoted(o.dst, name, o.quote)
	o.dst = append(o.dst, ':')
}

func (o *jsonObject) next() {
	if o.some {
		o.dst = append(o.dst, ',')
	} else {
		o.dst = append(o.dst, '{')
		o.some = true
	}
}

func (o *jsonObject) stringField(name, value string, omitEmpty bool) {
	if omitEmpty && value == "" {
		return
	}
	o.key(name)
	o.dst = appendQuoted(o.dst, value, o.quote)
}

func (o *jsonObject) end() []byte {
	if !o.some {
		return append(o.dst, "{}"...)
	}
	return append(o.dst, '}')
}

// appendJSONString quotes s as json.Marshal does (appendQuoted).
func appendJSONString(dst []byte, s string) []byte { return appendQuoted(dst, s, jsonStrings) }

// The three ways a string is quoted in what the webhook writes.
type quoting uint8

const (
	// jsonStrings is json.Marshal's: <, > and & escaped for HTML.
	jsonStrings quoting = iota
	// jsonStringsNoHTML is a json.Encoder's with SetEscapeHTML(false).
	jsonStringsNoHTML
	// slogStrings is slog's JSON handler's for string values: as
	// jsonStringsNoHTML, but \b and \f as \u0008 and \u000c.
	slogStrings
)

// appendQuoted quotes s: control characters as \n, \r, \t (and \b, \f
// but for slogStrings) or \u00XX, invalid UTF-8 as \ufffd, U+2028 and
// U+2029 escaped, and <, > and & as \u003c, \u003e, \u0026 for
// jsonStrings.
func appendQuoted(dst []byte, s string, q quoting) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && (q != jsonStrings || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch {
			case b == '\\' || b == '"':
				dst = append(dst, '\\', b)
			case b == '\b' && q != slogStrings:
				dst = append(dst, '\\', 'b')
			case b == '\f' && q != slogStrings:
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
