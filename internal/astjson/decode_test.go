package astjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	kjson "sigs.k8s.io/json"
)

// strictGo decodes as the webhook did before this package: strict
// sigs.k8s.io/json into Go values, integers kept as int64.
func strictGo(data []byte) (any, error) {
	var v any
	strictErrs, err := kjson.UnmarshalStrict(data, &v, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, err
	}
	if len(strictErrs) > 0 {
		return nil, strictErrs[0]
	}
	return v, nil
}

// reference is the document's JSON form as the API server writes it: the
// strict Go values encoded by encoding/json, read by OPA's own reader.
func reference(data []byte) (ast.Value, error) {
	v, err := strictGo(data)
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return ast.ValueFromReader(bytes.NewReader(js))
}

// agree checks that Decode, ValueOf of the strict Go values and the
// reference give the same value, down to each number's digits, or that
// Decode and the reference both refuse the input.
func agree(t *testing.T, data []byte) {
	t.Helper()
	got, err := Decode(data)
	want, wantErr := reference(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("Decode(%q): error %v, reference error %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	if got.Compare(want) != 0 || got.String() != want.String() {
		t.Fatalf("Decode(%q) = %v, reference %v", data, got, want)
	}
	v, _ := strictGo(data)
	fromGo, err := ValueOf(v)
	if err != nil {
		t.Fatalf("ValueOf(%q): %v", data, err)
	}
	if fromGo.Compare(want) != 0 || fromGo.String() != want.String() {
		t.Fatalf("ValueOf(%q) = %v, reference %v", data, fromGo, want)
	}
}

func TestDecodeAgreesWithTheReference(t *testing.T) {
	cases := map[string]string{
		"an object with every kind of value":                          `{"s":"x","n":1,"f":1.5,"t":true,"f2":false,"z":null,"a":[1,"b",{"c":[]}],"o":{}}`,
		"integers keep their digits":                                  `[0,-1,512,513,9223372036854775807,-9223372036854775808,123456789012]`,
		"integers beyond int64 go through float64":                    `[9223372036854775808,-9223372036854775809,123456789012345678901234567890]`,
		"minus zero becomes zero as an int64 would":                   `[-0,-0.0,0.0,1.0,1e3,1E+3,1e-3,2.50,-1.25e-7]`,
		"floats are written as encoding/json writes them":             `[1e7,1E+7,0.000001,0.0000001,1e-5,1.5e10,1e20,1e21,-1e-7,123.456e2,5e-324,1.7976931348623157e308]`,
		"escapes and unicode":                                         `{"q":"a\"b\\c\/d\n\t\u00e9\u4e2d\ud83d\ude00","u":"héllo 中","esc\u0041key":1}`,
		"a lone surrogate and bytes that are not UTF-8 become U+FFFD": "[\"\\ud800\",\"a\xffb\",\"\xc3\"]",
		"whitespace everywhere":                                       " \t\n{ \"a\" : [ 1 , 2 ] ,\r\n \"b\" : { } } \n",
		"scalars at the top":                                          `"top"`,
		"a duplicate key":                                             `{"a":1,"a":2}`,
		"a duplicate deep":                                            `{"spec":{"services":[{"name":"a","name":"b"}]}}`,
		"a large object":                                              largeObject(40, -1),
		"a duplicate in a large object":                               largeObject(40, 3),
		"a duplicate at the 16th member":                              largeObject(16, 0),
		"trailing garbage":                                            `{"a":1} x`,
		"a missing value":                                             `{"a":}`,
		"a trailing comma":                                            `[1,2,]`,
		"a leading zero":                                              `[01]`,
		"a negative leading zero":                                     `[-01]`,
		"a bare minus":                                                `[-]`,
		"a dot without digits":                                        `[1.]`,
		"an exponent without digits":                                  `[1e]`,
		"a number out of range":                                       `[1e999]`,
		"a control character":                                         "[\"a\x01b\"]",
		"an unterminated string":                                      `["abc`,
		"a bad escape":                                                `["\x"]`,
		"a truncated literal":                                         `[tru]`,
		"nothing":                                                     ``,
		"a single quote":                                              `['a']`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) { agree(t, []byte(in)) })
	}
}

// largeObject has n members k0..k(n-1) and, when dup >= 0, member k<dup>
// again at the end: past 16 members the decoder keeps a set of keys.
func largeObject(n, dup int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, `"k%d":{"v":%d},`, i, i)
	}
	if dup >= 0 {
		fmt.Fprintf(&b, `"k%d":1,`, dup)
	}
	b.WriteString(`"last":true}`)
	return b.String()
}

func TestNumbersHaveTheDigitsOfTheirJSONForm(t *testing.T) {
	for in, want := range map[string]string{
		"1e7": "10000000", "1.5e-7": "1.5e-7", "0.000001": "0.000001", "1e-5": "0.00001",
		"9223372036854775808": "9223372036854776000", "1e21": "1e+21", "2.50": "2.5", "-0.0": "-0",
	} {
		v, err := Decode([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if v.String() != want {
			t.Errorf("Decode(%s) = %v, want %s", in, v, want)
		}
	}
}

func TestDuplicatesAreNamedByPath(t *testing.T) {
	_, err := Decode([]byte(`{"a":1,"a":2,"spec":{"services":[{"name":"x"},{"name":"y","name":"z"}]},"m":{"k":{"k2":1,"k2":2}}}`))
	var dup *DuplicateError
	if !errors.As(err, &dup) {
		t.Fatalf("want a DuplicateError, got %v", err)
	}
	want := `duplicate field "a"; duplicate field "spec.services[1].name"; duplicate field "m.k.k2"`
	if err.Error() != want {
		t.Fatalf("got %q, want %q", err.Error(), want)
	}
}

func TestNestingIsBounded(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	if _, err := Decode([]byte(deep)); !errors.Is(err, errTooDeep) {
		t.Fatalf("want errTooDeep, got %v", err)
	}
	ok := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	if _, err := Decode([]byte(ok)); err != nil {
		t.Fatalf("100 levels: %v", err)
	}
}

func TestSyntaxErrorsNameTheOffset(t *testing.T) {
	_, err := Decode([]byte(`{"a": x}`))
	if err == nil || !strings.Contains(err.Error(), "offset 6") {
		t.Fatalf("want the offset of x, got %v", err)
	}
}

// reviewFixtures are real AdmissionReviews (kubectl and apiserver shapes).
func reviewFixtures(t testing.TB) [][]byte {
	var out [][]byte
	for _, dir := range []string{"../../test/testdata", "../../test/load/testdata"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		t.Fatal("no review fixtures found")
	}
	return out
}

func TestDecodeAgreesOnEveryReviewFixture(t *testing.T) {
	for _, b := range reviewFixtures(t) {
		agree(t, b)
	}
}

func FuzzDecodeAgreesWithTheReference(f *testing.F) {
	for _, b := range reviewFixtures(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"a":[1,1.5,-0,1e400,"\u00e9"],"a":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		agree(t, data)
	})
}

func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"realtime-create-allowed.json", "realtime-update-allowed.json", "pod-create-5k.json"} {
		data, err := os.ReadFile(filepath.Join("../../test/load/testdata", name))
		if err != nil {
			b.Skip(err)
		}
		b.Run(name+"/one-pass", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		// What the bundled policies and the webhook read of the objects
		// (policies.ObjectReads), the envelope whole.
		object := Paths([]string{"apiVersion"}, []string{"kind"}, []string{"metadata", "labels"}, []string{"metadata", "annotations"}, []string{"spec"})
		oldObject := Paths([]string{"apiVersion"}, []string{"kind"}, []string{"metadata", "labels"}, []string{"metadata", "annotations"}, []string{"spec", "hardware", "arch"})
		review := Every(map[string]*Projection{"request": Every(map[string]*Projection{"object": object, "oldObject": oldObject})})
		b.Run(name+"/one-pass-what-policies-read", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, _, err := DecodeProjected(data, review); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/maps-then-convert", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				v, err := strictGo(data)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ast.InterfaceToValue(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestDecodeCapturingReturnsTheValuesBytes(t *testing.T) {
	data := []byte(` {"request": {"uid":"u", "object" :  {"a": [1, {"b": "}"}]} , "old": null,"list":[{"object":1}]}, "object": "top"} `)
	v, raw, err := DecodeCapturing(data, []string{"request", "object"}, []string{"request", "old"}, []string{"request", "missing"}, []string{"object"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"a": [1, {"b": "}"}]}`, `null`, "", `"top"`}
	for i, w := range want {
		if string(raw[i]) != w {
			t.Errorf("capture %d: %q, want %q", i, raw[i], w)
		}
	}
	if raw[2] != nil {
		t.Errorf("an absent path captures nil, got %q", raw[2])
	}
	plain, err := Decode(data)
	if err != nil || plain.Compare(v) != 0 {
		t.Fatalf("DecodeCapturing's value %v differs from Decode's %v (%v)", v, plain, err)
	}
	if _, _, err := DecodeCapturing([]byte(`{"a":1,"a":2}`), []string{"a"}); err == nil {
		t.Fatal("a duplicate key is still an error")
	}
}

// Terms.String's values are ast.String values in every way OPA and Go
// look at them, and survive garbage collection while only they hold the
// slab.
func TestStringValuesArePlainStrings(t *testing.T) {
	var terms Terms
	var values []ast.Value
	for i := range 200 {
		values = append(values, terms.String(fmt.Sprintf("value-%d", i)))
	}
	terms = Terms{} // only the values keep the slabs alive now
	for range 3 {
		runtime.GC()
	}
	for i, v := range values {
		want := ast.String(fmt.Sprintf("value-%d", i))
		s, ok := v.(ast.String)
		if !ok || s != want {
			t.Fatalf("value %d: %T %q, want ast.String %q", i, v, s, want)
		}
		if v.Compare(want) != 0 || want.Compare(v) != 0 || v.Hash() != want.Hash() || v.String() != want.String() {
			t.Fatalf("value %d compares, hashes or prints unlike ast.String", i)
		}
		if v != ast.Value(want) {
			t.Fatalf("value %d is not == to the same ast.String", i)
		}
		switch v.(type) {
		case ast.String:
		default:
			t.Fatalf("value %d does not switch as ast.String", i)
		}
	}
	if v := terms.String(""); v != ast.Value(ast.String("")) {
		t.Fatal("the empty string")
	}
	if n := testing.AllocsPerRun(100, func() { _ = terms.String("no box") }); n > 0.1 {
		t.Fatalf("%.2f allocations per string; want a slab now and then", n)
	}
}

func TestAFloatCostsOneAllocation(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = formatFloat(1.5e-7) }); n > 1 {
		t.Fatalf("formatFloat allocates %v times, want 1 (the string)", n)
	}
}

// TestValuesOutliveTheirDecoder decodes the review fixtures and a
// two duplicate-key documents many times over from several goroutines, so the
// pooled decoders and their arenas pass between documents and goroutines,
// keeps every value and error, and checks each against the reference
// once all are done: a value or duplicate list a later document's
// decoding wrote over would differ (and -race would see the write).
func TestValuesOutliveTheirDecoder(t *testing.T) {
	docs := append(reviewFixtures(t),
		[]byte(`{"a":{"b":[1,"x",{"c":"d"}]},"a":2,"e":"é\n"}`), []byte(`[{"x":1,"y":{"z":0,"z":1}}]`))
	want := make([]ast.Value, len(docs))
	wantErr := make([]string, len(docs))
	for i, d := range docs {
		v, err := reference(d)
		want[i] = v
		if _, derr := Decode(d); derr != nil {
			wantErr[i] = derr.Error()
		}
		if (err != nil) != (wantErr[i] != "") {
			t.Fatalf("document %d: reference error %v, Decode's %q", i, err, wantErr[i])
		}
	}
	const workers, rounds = 4, 20
	type kept struct {
		doc int
		v   ast.Value
		err error
	}
	results := make([][]kept, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				for i := range docs {
					doc := (i + r + w) % len(docs)
					v, err := Decode(docs[doc])
					results[w] = append(results[w], kept{doc, v, err})
				}
			}
		}()
	}
	wg.Wait()
	for _, rs := range results {
		for _, k := range rs {
			if k.err != nil || wantErr[k.doc] != "" {
				if k.err == nil || k.err.Error() != wantErr[k.doc] {
					t.Fatalf("document %d: error %v, want %q", k.doc, k.err, wantErr[k.doc])
				}
				continue
			}
			if k.v.Compare(want[k.doc]) != 0 || k.v.String() != want[k.doc].String() {
				t.Fatalf("document %d changed after decoding: %v, want %v", k.doc, k.v, want[k.doc])
			}
		}
	}
}

func TestFindReadsUpToTheValueAtAPath(t *testing.T) {
	cases := []struct {
		data string
		path []string
		want string // "" for none
	}{
		{`{"request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"object":{}}}`, []string{"request", "kind"}, `{"group":"","version":"v1","kind":"Pod"}`},
		{` { "a" : [1, {"b": 2}] , "request" : { "k\u0069nd" : "x" } } `, []string{"request", "kind"}, `"x"`},
		{`{"request":{"object":{"kind":"Pod"}}}`, []string{"request", "kind"}, ""},
		{`{"request":[{"kind":1}]}`, []string{"request", "kind"}, ""},
		{`{"request":{}}`, []string{"request", "kind"}, ""},
		{`{"request":{"kind":`, []string{"request", "kind"}, ""},
		{`{"request":{"kind":{"group":"a"`, []string{"request", "kind"}, ""},
		// What lies after the value is not read: the document's own
		// decoding judges it.
		{`{"request":{"kind":1,}`, []string{"request", "kind"}, "1"},
		{`{"x":tru,"request":{"kind":1}}`, []string{"request", "kind"}, ""},
		{`[]`, []string{"request"}, ""},
		{``, []string{"request"}, ""},
	}
	for _, c := range cases {
		if got := string(Find([]byte(c.data), MaxDepth, c.path...)); got != c.want {
			t.Errorf("Find(%s, %v) = %q, want %q", c.data, c.path, got, c.want)
		}
	}
}

// FuzzFindAgreesWithDecode: for a document Decode takes, Find gives the
// bytes of exactly the value Decode reads at the path, or nil when it has
// none there.
func FuzzFindAgreesWithDecode(f *testing.F) {
	for _, b := range reviewFixtures(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"request":{"kind":{"kind":"Pod"},"kind":1}}`))
	f.Add([]byte(`{"request":[],"request":{"kind":2}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, err := Decode(data)
		if err != nil {
			return
		}
		var want ast.Value
		if request, ok := whole.(ast.Object); ok {
			if r := request.Get(ast.StringTerm("request")); r != nil {
				if obj, ok := r.Value.(ast.Object); ok {
					if k := obj.Get(ast.StringTerm("kind")); k != nil {
						want = k.Value
					}
				}
			}
		}
		found := Find(data, MaxDepth, "request", "kind")
		if want == nil {
			if found != nil {
				t.Fatalf("Find(%q) = %q, Decode has no request.kind", data, found)
			}
			return
		}
		got, err := Decode(found)
		if err != nil || got.Compare(want) != 0 {
			t.Fatalf("Find(%q) = %q (%v), Decode reads %v", data, found, err, want)
		}
	})
}
