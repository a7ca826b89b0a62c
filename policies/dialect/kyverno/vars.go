package kyverno

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kyverno/kyverno/ext/wildcard"
	kyvernopattern "github.com/kyverno/kyverno/pkg/engine/pattern"
	"k8s.io/apimachinery/pkg/api/resource"
)

// variablePattern is Kyverno's: {{ ... }} at the start of a string or
// after any character but a backslash, with one level of braces inside
// (a JMESPath multiselect hash).
var variablePattern = regexp.MustCompile(`(^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})`)

// document is Kyverno's JSON context of one request as a plain JSON
// document: request.{object,oldObject,operation,userInfo,namespace},
// serviceAccountName and serviceAccountNamespace, foreach elements and
// context variables at the top level; and `images`, put in when a query
// reads it, as Kyverno's deferred loader does.
type document struct {
	vars map[string]any
	// images is nil for a rule that never names images.
	images *imageSource
}

// docSource gives a rule its document, built on first use: a pattern
// without variables that holds never pays for it.
type docSource func() document

// lazyDocument memoizes build.
func lazyDocument(build func() document) docSource {
	var d document
	return func() document {
		if d.vars == nil {
			d = build()
		}
		return d
	}
}

func (d document) clone() document {
	out := make(map[string]any, len(d.vars)+4)
	for k, v := range d.vars {
		out[k] = v
	}
	return document{vars: out, images: d.images}
}

// query evaluates a JMESPath expression with Kyverno's functions; a path
// that does not exist is an error, as in Kyverno. An expression that
// reads images loads them first (again, as Kyverno reloads them on each
// such query); an object without images leaves `images` out.
func (d document) query(expr string) (any, error) {
	if d.images != nil && readsImages.MatchString(expr) {
		images, err := d.images.get()
		if err != nil {
			return nil, err
		}
		if len(images) > 0 {
			mergeImages(d.vars, images)
		}
	}
	return search(expr, d.vars)
}

// substitute replaces the variables of every key and leaf string of v,
// Kyverno's way: a string that is one variable becomes its value, of any
// type; a variable inside a string is written into it (JSON for lists and
// maps); an escaped \{{ stays literal. On DELETE request.object reads the
// old object.
func substitute(d docSource, v any, deleting bool) (any, error) {
	switch t := v.(type) {
	case string:
		return substituteString(d, t, deleting)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			nk, err := substituteString(d, k, deleting)
			if err != nil {
				return nil, err
			}
			key, ok := nk.(string)
			if !ok {
				key = fmt.Sprint(nk)
			}
			if out[key], err = substitute(d, x, deleting); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			var err error
			if out[i], err = substitute(d, x, deleting); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}

func substituteString(d docSource, s string, deleting bool) (any, error) {
	for range 32 {
		loc := variablePattern.FindStringSubmatchIndex(s)
		if loc == nil {
			return strings.ReplaceAll(s, `\{{`, "{{"), nil
		}
		whole := s[loc[4]:loc[5]]
		expr := strings.TrimSpace(whole[2 : len(whole)-2])
		if expr == "@" {
			return nil, errors.New("{{@}} references are not supported")
		}
		if deleting {
			expr = strings.ReplaceAll(expr, "request.object", "request.oldObject")
		}
		val, err := d().query(expr)
		if err != nil {
			return nil, fmt.Errorf("failed to resolve %s: %w", expr, err)
		}
		if loc[4] == 0 && loc[5] == len(s) {
			return val, nil
		}
		var text string
		switch x := val.(type) {
		case string:
			text = x
		case nil:
			text = "null"
		case map[string]any, []any:
			raw, err := json.Marshal(x)
			if err != nil {
				return nil, err
			}
			text = string(raw)
		default:
			text = fmt.Sprint(x)
		}
		s = s[:loc[4]] + text + s[loc[5]:]
	}
	return nil, fmt.Errorf("variables in %q do not resolve after 32 substitutions", s)
}

// conditions are any/all blocks or, in the older form, a list that must
// all hold.
type condition struct {
	Key      any    `json:"key"`
	Operator string `json:"operator"`
	Value    any    `json:"value"`
	Message  string `json:"message"`
}

// evaluateConditions judges a preconditions or deny.conditions value:
// {any: [...], all: [...]} (any one of any, and every one of all) or a
// list of conditions that must all hold. The message is the failed
// conditions' (or, when they hold, the held ones') messages.
func evaluateConditions(d docSource, raw any, deleting bool) (bool, string, error) {
	switch t := raw.(type) {
	case nil:
		return true, "", nil
	case []any:
		var msgs []string
		for _, c := range t {
			ok, msg, err := evaluateCondition(d, c, deleting)
			if err != nil || !ok {
				return false, msg, err
			}
			msgs = appendNonEmpty(msgs, msg)
		}
		return true, strings.Join(msgs, "; "), nil
	case map[string]any:
		anyOK, allOK := true, true
		var held, failed []string
		if list, ok := t["any"].([]any); ok {
			anyOK = false
			for _, c := range list {
				ok, msg, err := evaluateCondition(d, c, deleting)
				if err != nil {
					return false, "", err
				}
				if ok {
					anyOK = true
					held = appendNonEmpty(held, msg)
					break
				}
				failed = appendNonEmpty(failed, msg)
			}
		}
		if list, ok := t["all"].([]any); ok {
			for _, c := range list {
				ok, msg, err := evaluateCondition(d, c, deleting)
				if err != nil {
					return false, "", err
				}
				if !ok {
					allOK = false
					failed = appendNonEmpty(failed, msg)
					break
				}
				held = appendNonEmpty(held, msg)
			}
		}
		for k := range t {
			if k != "any" && k != "all" {
				return false, "", fmt.Errorf("conditions have any and all, not %q", k)
			}
		}
		if anyOK && allOK {
			return true, strings.Join(held, "; "), nil
		}
		return false, strings.Join(failed, "; "), nil
	}
	return false, "", fmt.Errorf("conditions must be {any: [...], all: [...]} or a list, not %T", raw)
}

func appendNonEmpty(l []string, s string) []string {
	if s != "" {
		return append(l, s)
	}
	return l
}

func evaluateCondition(d docSource, raw any, deleting bool) (bool, string, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return false, "", fmt.Errorf("a condition is a mapping with key, operator and value, not %T", raw)
	}
	var c condition
	b, _ := json.Marshal(m)
	if err := json.Unmarshal(b, &c); err != nil {
		return false, "", err
	}
	key, err := substitute(d, c.Key, deleting)
	if err != nil {
		return false, "", fmt.Errorf("failed to substitute variables in condition key: %w", err)
	}
	value, err := substitute(d, c.Value, deleting)
	if err != nil {
		return false, "", fmt.Errorf("failed to substitute variables in condition value: %w", err)
	}
	op, ok := operators[strings.ToLower(c.Operator)]
	if !ok {
		return false, "", fmt.Errorf("%q is not a condition operator", c.Operator)
	}
	return op(normalize(key), normalize(value)), c.Message, nil
}

// normalize makes numbers float64 and typed lists and maps generic, as
// JSON decoding leaves them.
func normalize(v any) any {
	switch t := v.(type) {
	case int:
		return float64(t)
	case int32:
		return float64(t)
	case int64:
		return float64(t)
	case json.Number:
		f, _ := t.Float64()
		return f
	case []string:
		out := make([]any, len(t))
		for i, s := range t {
			out[i] = s
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = normalize(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = normalize(x)
		}
		return out
	}
	return v
}

type operator func(key, value any) bool

var operators = map[string]operator{
	"equals":                      equals,
	"equal":                       equals,
	"notequals":                   func(k, v any) bool { return !equals(k, v) },
	"notequal":                    func(k, v any) bool { return !equals(k, v) },
	"anyin":                       func(k, v any) bool { return in(k, v, false, false) },
	"allin":                       func(k, v any) bool { return in(k, v, true, false) },
	"anynotin":                    func(k, v any) bool { return in(k, v, false, true) },
	"allnotin":                    func(k, v any) bool { return in(k, v, true, true) },
	"in":                          func(k, v any) bool { return in(k, v, true, false) },
	"notin":                       func(k, v any) bool { return !in(k, v, true, false) },
	"greaterthan":                 compare(func(c int) bool { return c > 0 }),
	"greaterthanorequals":         compare(func(c int) bool { return c >= 0 }),
	"lessthan":                    compare(func(c int) bool { return c < 0 }),
	"lessthanorequals":            compare(func(c int) bool { return c <= 0 }),
	"durationgreaterthan":         compare(func(c int) bool { return c > 0 }),
	"durationgreaterthanorequals": compare(func(c int) bool { return c >= 0 }),
	"durationlessthan":            compare(func(c int) bool { return c < 0 }),
	"durationlessthanorequals":    compare(func(c int) bool { return c <= 0 }),
}

// equals is Kyverno's Equals: strings compare as durations, then
// quantities, then with the value's wildcards; numbers as numbers (a
// number equals its string); lists and maps deeply.
func equals(key, value any) bool {
	switch k := key.(type) {
	case string:
		if kd, vd, ok := durations(k, value); ok {
			return kd == vd
		}
		if kq, err := resource.ParseQuantity(k); err == nil {
			if vs, ok := value.(string); ok {
				vq, err := resource.ParseQuantity(vs)
				return err == nil && kq.Cmp(vq) == 0
			}
		}
		vs, ok := value.(string)
		return ok && wildcard.Match(vs, k)
	case float64:
		switch v := value.(type) {
		case float64:
			return k == v
		case string:
			f, err := strconv.ParseFloat(v, 64)
			return err == nil && f == k
		}
		return false
	case bool:
		switch v := value.(type) {
		case bool:
			return k == v
		case string:
			b, err := strconv.ParseBool(v)
			return err == nil && b == k
		}
		return false
	case nil:
		return value == nil
	}
	return reflect.DeepEqual(key, value)
}

// in is AnyIn (all=false), AllIn (all=true) and their NotIn forms: each
// key element (a scalar is a list of one) is looked up among the values
// with wildcards either way, or within a range "a-b".
func in(key, value any, all, not bool) bool {
	keys := stringsOf(key)
	if keys == nil {
		return false
	}
	var values []string
	switch v := value.(type) {
	case []any:
		values = stringsOf(v)
	case string:
		var arr []string
		if json.Valid([]byte(v)) && json.Unmarshal([]byte(v), &arr) == nil {
			values = arr
		} else {
			values = []string{v}
		}
	case float64, bool:
		values = []string{fmt.Sprint(v)}
	default:
		return false
	}
	found := func(k string) bool {
		for _, v := range values {
			if wildcard.Match(v, k) || wildcard.Match(k, v) {
				return true
			}
			if strings.Contains(v, "-") && kyvernopattern.Validate(discard, k, v) {
				return true
			}
		}
		return false
	}
	hits := 0
	for _, k := range keys {
		if found(k) {
			hits++
		}
	}
	switch {
	case !all && !not:
		return hits > 0
	case all && !not:
		return hits == len(keys)
	case !all && not:
		return hits < len(keys)
	}
	return hits == 0
}

func stringsOf(v any) []string {
	switch t := v.(type) {
	case []any:
		out := make([]string, len(t))
		for i, x := range t {
			out[i] = scalarString(x)
		}
		return out
	case string, float64, bool:
		return []string{scalarString(t)}
	}
	return nil
}

func scalarString(v any) string {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// compare orders numbers, numeric strings, durations and quantities.
func compare(holds func(int) bool) operator {
	return func(key, value any) bool {
		ks, vs := scalarString(key), scalarString(value)
		if kd, vd, ok := durations(ks, vs); ok {
			return holds(cmp(float64(kd), float64(vd)))
		}
		kf, kerr := strconv.ParseFloat(ks, 64)
		vf, verr := strconv.ParseFloat(vs, 64)
		if kerr == nil && verr == nil {
			return holds(cmp(kf, vf))
		}
		kq, kerr := resource.ParseQuantity(ks)
		vq, verr := resource.ParseQuantity(vs)
		if kerr == nil && verr == nil {
			return holds(kq.Cmp(vq))
		}
		return false
	}
}

func cmp(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// durations parses both sides as durations when at least one is written
// as one (a bare number on the other side is seconds).
func durations(key string, value any) (time.Duration, time.Duration, bool) {
	vs := scalarString(value)
	kd, kerr := time.ParseDuration(key)
	vd, verr := time.ParseDuration(vs)
	if kerr != nil && verr != nil {
		return 0, 0, false
	}
	if kerr != nil {
		f, err := strconv.ParseFloat(key, 64)
		if err != nil {
			return 0, 0, false
		}
		kd = time.Duration(f * float64(time.Second))
	}
	if verr != nil {
		f, err := strconv.ParseFloat(vs, 64)
		if err != nil {
			return 0, 0, false
		}
		vd = time.Duration(f * float64(time.Second))
	}
	return kd, vd, true
}
