package kyverno

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	gojmespath "github.com/kyverno/go-jmespath"
	"github.com/kyverno/kyverno/ext/wildcard"
	"golang.org/x/mod/semver"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"
)

// Kyverno's JMESPath (github.com/kyverno/go-jmespath: a missing key is an
// error) with Kyverno's own functions, written here to Kyverno's
// documented behaviour: its jmespath package links in its configuration
// package, and through it kustomize and client-go (61 MB of binary).
// A function Kyverno has that is not here is refused at load
// (unsupportedFunctions), never evaluated as something else.

var (
	callerOnce sync.Once
	caller     *gojmespath.FunctionCaller
	// compiled caches parsed expressions: a policy's expressions are few
	// and judged on every request.
	compiled sync.Map // string → *gojmespath.JMESPath
)

func functionCaller() *gojmespath.FunctionCaller {
	callerOnce.Do(func() {
		caller = gojmespath.NewFunctionCaller()
		for _, f := range kyvernoFunctions {
			caller.Register(f)
		}
	})
	return caller
}

// search evaluates expr over data with Kyverno's functions.
func search(expr string, data any) (any, error) {
	var q *gojmespath.JMESPath
	if v, ok := compiled.Load(expr); ok {
		q = v.(*gojmespath.JMESPath)
	} else {
		var err error
		if q, err = gojmespath.Compile(expr); err != nil {
			return nil, fmt.Errorf("invalid JMESPath %q: %w", expr, err)
		}
		compiled.Store(expr, q)
	}
	return q.Search(data, gojmespath.WithFunctionCaller(functionCaller()))
}

var (
	jpString = []gojmespath.JpType{gojmespath.JpString}
	jpNumber = []gojmespath.JpType{gojmespath.JpNumber}
	jpArray  = []gojmespath.JpType{gojmespath.JpArray}
	// jpNumberOrString: a number, or a quantity or duration written as a
	// string ('300Mi', '1h').
	jpNumberOrString = []gojmespath.JpType{gojmespath.JpNumber, gojmespath.JpString}
	jpObject         = []gojmespath.JpType{gojmespath.JpObject}
)

func args(types ...[]gojmespath.JpType) []gojmespath.ArgSpec {
	out := make([]gojmespath.ArgSpec, len(types))
	for i, t := range types {
		out[i] = gojmespath.ArgSpec{Types: t}
	}
	return out
}

func stringFn(name string, f func(string) any) gojmespath.FunctionEntry {
	return gojmespath.FunctionEntry{Name: name, Arguments: args(jpString), Handler: func(a []any) (any, error) { return f(a[0].(string)), nil }}
}

func string2Fn(name string, f func(a, b string) (any, error)) gojmespath.FunctionEntry {
	return gojmespath.FunctionEntry{Name: name, Arguments: args(jpString, jpString), Handler: func(a []any) (any, error) { return f(a[0].(string), a[1].(string)) }}
}

func string3Fn(name string, f func(a, b, c string) (any, error)) gojmespath.FunctionEntry {
	return gojmespath.FunctionEntry{Name: name, Arguments: args(jpString, jpString, jpString), Handler: func(a []any) (any, error) {
		return f(a[0].(string), a[1].(string), a[2].(string))
	}}
}

func arithmetic(name string, f func(a, b float64) (float64, error)) gojmespath.FunctionEntry {
	return gojmespath.FunctionEntry{Name: name, Arguments: args(jpNumber, jpNumber), Handler: func(a []any) (any, error) {
		return f(a[0].(float64), a[1].(float64))
	}}
}

var kyvernoFunctions = []gojmespath.FunctionEntry{
	string2Fn("compare", func(a, b string) (any, error) { return float64(strings.Compare(a, b)), nil }),
	string2Fn("equal_fold", func(a, b string) (any, error) { return strings.EqualFold(a, b), nil }),
	gojmespath.FunctionEntry{Name: "replace", Arguments: args(jpString, jpString, jpString, jpNumber), Handler: func(a []any) (any, error) {
		return strings.Replace(a[0].(string), a[1].(string), a[2].(string), int(a[3].(float64))), nil
	}},
	string3Fn("replace_all", func(s, old, repl string) (any, error) { return strings.ReplaceAll(s, old, repl), nil }),
	stringFn("to_upper", func(s string) any { return strings.ToUpper(s) }),
	stringFn("to_lower", func(s string) any { return strings.ToLower(s) }),
	string2Fn("trim", func(s, cut string) (any, error) { return strings.Trim(s, cut), nil }),
	string2Fn("trim_prefix", func(s, p string) (any, error) { return strings.TrimPrefix(s, p), nil }),
	string2Fn("split", func(s, sep string) (any, error) {
		parts := strings.Split(s, sep)
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	}),
	gojmespath.FunctionEntry{Name: "regex_replace_all", Arguments: args(jpString, []gojmespath.JpType{gojmespath.JpString, gojmespath.JpNumber}, []gojmespath.JpType{gojmespath.JpString, gojmespath.JpNumber}),
		Handler: func(a []any) (any, error) {
			re, err := regexp.Compile(a[0].(string))
			if err != nil {
				return nil, err
			}
			return re.ReplaceAllString(scalarString(a[1]), scalarString(a[2])), nil
		}},
	gojmespath.FunctionEntry{Name: "regex_replace_all_literal", Arguments: args(jpString, []gojmespath.JpType{gojmespath.JpString, gojmespath.JpNumber}, []gojmespath.JpType{gojmespath.JpString, gojmespath.JpNumber}),
		Handler: func(a []any) (any, error) {
			re, err := regexp.Compile(a[0].(string))
			if err != nil {
				return nil, err
			}
			return re.ReplaceAllLiteralString(scalarString(a[1]), scalarString(a[2])), nil
		}},
	gojmespath.FunctionEntry{Name: "regex_match", Arguments: args(jpString, []gojmespath.JpType{gojmespath.JpString, gojmespath.JpNumber}),
		Handler: func(a []any) (any, error) { return regexp.MatchString(a[0].(string), scalarString(a[1])) }},
	gojmespath.FunctionEntry{Name: "pattern_match", Arguments: args(jpString, []gojmespath.JpType{gojmespath.JpString, gojmespath.JpNumber}),
		Handler: func(a []any) (any, error) { return wildcard.Match(a[0].(string), scalarString(a[1])), nil }},
	gojmespath.FunctionEntry{Name: "label_match", Arguments: args(jpObject, jpObject), Handler: func(a []any) (any, error) {
		want, have := labels.Set{}, labels.Set{}
		for k, v := range a[0].(map[string]any) {
			want[k] = fmt.Sprint(v)
		}
		for k, v := range a[1].(map[string]any) {
			have[k] = fmt.Sprint(v)
		}
		return labels.SelectorFromSet(want).Matches(have), nil
	}},
	gojmespath.FunctionEntry{Name: "to_boolean", Arguments: args(jpString), Handler: func(a []any) (any, error) {
		switch strings.ToLower(a[0].(string)) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, fmt.Errorf("lowercase argument must be 'true' or 'false' (provided: %q)", a[0])
	}},
	arithmetic("add", func(a, b float64) (float64, error) { return a + b, nil }),
	arithmetic("subtract", func(a, b float64) (float64, error) { return a - b, nil }),
	arithmetic("multiply", func(a, b float64) (float64, error) { return a * b, nil }),
	gojmespath.FunctionEntry{Name: "divide", Arguments: args(jpNumberOrString, jpNumberOrString), Handler: divide},
	arithmetic("modulo", func(a, b float64) (float64, error) {
		if b == 0 || a != math.Trunc(a) || b != math.Trunc(b) {
			return 0, errors.New("modulo needs a non-zero integer divisor and an integer dividend")
		}
		return math.Mod(a, b), nil
	}),
	gojmespath.FunctionEntry{Name: "round", Arguments: args(jpNumber, jpNumber), Handler: func(a []any) (any, error) {
		p := math.Pow(10, a[1].(float64))
		return math.Round(a[0].(float64)*p) / p, nil
	}},
	stringFn("base64_decode", func(s string) any {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil
		}
		return string(b)
	}),
	stringFn("base64_encode", func(s string) any { return base64.StdEncoding.EncodeToString([]byte(s)) }),
	stringFn("path_canonicalize", func(s string) any { return path.Clean(s) }),
	gojmespath.FunctionEntry{Name: "truncate", Arguments: args(jpString, jpNumber), Handler: func(a []any) (any, error) {
		s, n := a[0].(string), int(a[1].(float64))
		if n < 0 {
			return nil, errors.New("length must be non-negative")
		}
		if r := []rune(s); len(r) > n {
			return string(r[:n]), nil
		}
		return s, nil
	}},
	string2Fn("semver_compare", func(v, r string) (any, error) { return semverHolds(v, r) }),
	stringFn("parse_json", func(s string) any {
		var out any
		if json.Unmarshal([]byte(s), &out) != nil {
			return nil
		}
		return out
	}),
	stringFn("parse_yaml", func(s string) any {
		var out any
		if sigsyaml.Unmarshal([]byte(s), &out) != nil {
			return nil
		}
		return out
	}),
	gojmespath.FunctionEntry{Name: "items", Arguments: args([]gojmespath.JpType{gojmespath.JpObject, gojmespath.JpArray}, jpString, jpString), Handler: func(a []any) (any, error) {
		kName, vName := a[1].(string), a[2].(string)
		var out []any
		switch t := a[0].(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				out = append(out, map[string]any{kName: k, vName: t[k]})
			}
		case []any:
			for i, v := range t {
				out = append(out, map[string]any{kName: float64(i), vName: v})
			}
		}
		return out, nil
	}},
	gojmespath.FunctionEntry{Name: "object_from_lists", Arguments: args(jpArray, jpArray), Handler: func(a []any) (any, error) {
		keys, values := a[0].([]any), a[1].([]any)
		out := map[string]any{}
		for i, k := range keys {
			var v any
			if i < len(values) {
				v = values[i]
			}
			out[fmt.Sprint(k)] = v
		}
		return out, nil
	}},
	gojmespath.FunctionEntry{Name: "lookup", Arguments: args([]gojmespath.JpType{gojmespath.JpObject, gojmespath.JpArray}, []gojmespath.JpType{gojmespath.JpString, gojmespath.JpNumber}), Handler: func(a []any) (any, error) {
		switch t := a[0].(type) {
		case map[string]any:
			return t[scalarString(a[1])], nil
		case []any:
			i, ok := a[1].(float64)
			if !ok || i != math.Trunc(i) || i < 0 || int(i) >= len(t) {
				return nil, nil
			}
			return t[int(i)], nil
		}
		return nil, nil
	}},
	gojmespath.FunctionEntry{Name: "time_now_utc", Handler: func([]any) (any, error) { return time.Now().UTC().Format(time.RFC3339), nil }},
	gojmespath.FunctionEntry{Name: "time_now", Handler: func([]any) (any, error) { return time.Now().Format(time.RFC3339), nil }},
	string3Fn("time_since", func(layout, t1, t2 string) (any, error) {
		if layout == "" {
			layout = time.RFC3339
		}
		a, err := time.Parse(layout, t1)
		if err != nil {
			return nil, err
		}
		b := time.Now()
		if t2 != "" {
			if b, err = time.Parse(layout, t2); err != nil {
				return nil, err
			}
		}
		return b.Sub(a).String(), nil
	}),
	string2Fn("time_add", func(t, d string) (any, error) {
		tt, err := time.Parse(time.RFC3339, t)
		if err != nil {
			return nil, err
		}
		dd, err := time.ParseDuration(d)
		if err != nil {
			return nil, err
		}
		return tt.Add(dd).Format(time.RFC3339), nil
	}),
	string2Fn("time_before", func(a, b string) (any, error) {
		return timeOrder(a, b, func(x, y time.Time) bool { return x.Before(y) })
	}),
	string2Fn("time_after", func(a, b string) (any, error) {
		return timeOrder(a, b, func(x, y time.Time) bool { return x.After(y) })
	}),
	string3Fn("time_between", func(t, start, end string) (any, error) {
		tt, err1 := time.Parse(time.RFC3339, t)
		s, err2 := time.Parse(time.RFC3339, start)
		e, err3 := time.Parse(time.RFC3339, end)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		return tt.After(s) && tt.Before(e), nil
	}),
	string2Fn("time_diff", func(a, b string) (any, error) {
		x, err1 := time.Parse(time.RFC3339, a)
		y, err2 := time.Parse(time.RFC3339, b)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		return y.Sub(x).String(), nil
	}),
	stringFn("time_utc", func(s string) any {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return nil
		}
		return t.UTC().Format(time.RFC3339)
	}),
	string2Fn("time_parse", func(layout, s string) (any, error) {
		t, err := time.Parse(layout, s)
		if err != nil {
			return nil, err
		}
		return t.Format(time.RFC3339), nil
	}),
	gojmespath.FunctionEntry{Name: "sum", Arguments: args(jpArray), Handler: func(a []any) (any, error) {
		var total float64
		for _, x := range a[0].([]any) {
			f, ok := x.(float64)
			if !ok {
				return nil, fmt.Errorf("sum adds numbers, not %T", x)
			}
			total += f
		}
		return total, nil
	}},
}

func timeOrder(a, b string, f func(x, y time.Time) bool) (any, error) {
	x, err1 := time.Parse(time.RFC3339, a)
	y, err2 := time.Parse(time.RFC3339, b)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return f(x, y), nil
}

// semverHolds says version v satisfies a range such as ">=1.2.0" or
// "<2.0.0": the common forms of Kyverno's semver_compare.
func semverHolds(v, r string) (bool, error) {
	canon := func(s string) string {
		s = strings.TrimSpace(s)
		if !strings.HasPrefix(s, "v") {
			s = "v" + s
		}
		return s
	}
	for _, part := range strings.Fields(r) {
		op := part[:len(part)-len(strings.TrimLeft(part, "<>=!"))]
		want := canon(strings.TrimPrefix(part, op))
		if !semver.IsValid(want) || !semver.IsValid(canon(v)) {
			return false, fmt.Errorf("semver_compare: %q or %q is not a version", v, part)
		}
		c := semver.Compare(canon(v), want)
		ok := false
		switch op {
		case "", "=", "==":
			ok = c == 0
		case "!=":
			ok = c != 0
		case ">":
			ok = c > 0
		case ">=":
			ok = c >= 0
		case "<":
			ok = c < 0
		case "<=":
			ok = c <= 0
		default:
			return false, fmt.Errorf("semver_compare: operator %q is not supported", op)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// kyvernoOnly are Kyverno's functions this package does not implement.
var kyvernoOnly = []string{"x509_decode", "image_normalize", "random", "is_external_url", "time_to_cron", "time_truncate", "lookup_image", "to_number_from_quantity"}

var functionCall = regexp.MustCompile(`([a-z_][a-z0-9_]*)\s*\(`)

// unsupportedFunctions names the Kyverno functions an expression calls
// that are not implemented here.
func unsupportedFunctions(expr string) []string {
	var out []string
	for _, m := range functionCall.FindAllStringSubmatch(expr, -1) {
		if slices.Contains(kyvernoOnly, m[1]) && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// divide is Kyverno's: numbers, or two quantities ('300Mi', '100Mi') or
// two durations ('1h', '30m') whose ratio is a number.
func divide(a []any) (any, error) {
	x, y, err := sameUnits(a[0], a[1])
	if err != nil {
		return nil, err
	}
	if y == 0 {
		return nil, errors.New("zero divisor")
	}
	return x / y, nil
}

// sameUnits reads two operands as numbers: both numbers, both quantities
// or both durations.
func sameUnits(a, b any) (float64, float64, error) {
	fa, aNum := a.(float64)
	fb, bNum := b.(float64)
	if aNum && bNum {
		return fa, fb, nil
	}
	sa, aStr := a.(string)
	sb, bStr := b.(string)
	if aStr && bStr {
		if da, err := time.ParseDuration(sa); err == nil {
			if db, err := time.ParseDuration(sb); err == nil {
				return float64(da), float64(db), nil
			}
		}
		qa, errA := resource.ParseQuantity(sa)
		qb, errB := resource.ParseQuantity(sb)
		if errA == nil && errB == nil {
			return qa.AsApproximateFloat64(), qb.AsApproximateFloat64(), nil
		}
	}
	return 0, 0, fmt.Errorf("operands %v and %v are not two numbers, two quantities or two durations", a, b)
}
