package astjson

import (
	"errors"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// parsePaths reads "a.b;c" as the paths [a b] and [c].
func parsePaths(spec string) [][]string {
	var paths [][]string
	for _, p := range strings.Split(spec, ";") {
		if p == "*" {
			paths = append(paths, []string{})
		} else if p != "" {
			paths = append(paths, strings.Split(p, "."))
		}
	}
	return paths
}

// projectedAgrees checks that decoding data under p accepts or refuses it
// as Decode does, with the same error, and gives Decode's value without
// what p leaves out, and the same captures.
func projectedAgrees(t *testing.T, data []byte, p *Projection) {
	t.Helper()
	capture := [][]string{{"request", "object"}, {"a"}}
	full, fullRaw, fullErr := DecodeCapturing(data, capture...)
	var got ast.Value
	var raw [][]byte
	var err error
	if p != nil && p.stream != 0 {
		err = DecodeMembers(data, MaxDepth, p, func(top ast.Value, members []Member, captured [][]byte) error {
			got, raw = top, captured
			if top == StreamedObject {
				got = assemble(p, members)
			}
			return nil
		}, capture...)
	} else {
		got, raw, err = DecodeProjected(data, p, capture...)
	}
	if (err == nil) != (fullErr == nil) || (err != nil && err.Error() != fullErr.Error()) {
		t.Fatalf("DecodeProjected(%q, %v): error %v, Decode's %v", data, p, err, fullErr)
	}
	if err != nil {
		var dup, fullDup *DuplicateError
		if errors.As(err, &dup) != errors.As(fullErr, &fullDup) {
			t.Fatalf("DecodeProjected(%q, %v): error %T, Decode's %T", data, p, err, fullErr)
		}
		return
	}
	if want := p.Apply(full); got.Compare(want) != 0 || got.String() != want.String() {
		t.Fatalf("DecodeProjected(%q, %v) = %v, want %v", data, p, got, want)
	}
	for i := range raw {
		if string(raw[i]) != string(fullRaw[i]) || (raw[i] == nil) != (fullRaw[i] == nil) {
			t.Fatalf("DecodeProjected(%q, %v) captured %q at %v, Decode %q", data, p, raw[i], capture[i], fullRaw[i])
		}
	}
}

// assemble builds the object DecodeMembers listed for streamed p: the
// members listed under p's id, in order, each streamed one assembled in
// turn.
func assemble(p *Projection, members []Member) ast.Value {
	obj := ast.NewObject()
	for _, m := range members {
		if m.Object != p.stream {
			continue
		}
		v := m.Value
		if v == StreamedObject {
			child, _ := p.Member(m.Key)
			v = assemble(child, members)
		}
		obj.Insert(ast.StringTerm(m.Key), ast.NewTerm(v))
	}
	return obj
}

// projectionsOf are the projections a spec names: the paths alone, and
// the paths below request.object of an otherwise whole document, as the
// webhook decodes an AdmissionReview, once as values and once with the
// document and its request streamed, their userInfo too.
func projectionsOf(spec string) []*Projection {
	paths := parsePaths(spec)
	below := Paths(paths...)
	return []*Projection{Paths(paths...), Every(map[string]*Projection{"request": Every(map[string]*Projection{"object": below, "oldObject": below})}),
		Streamed(1, map[string]*Projection{"request": Streamed(2, map[string]*Projection{"object": below, "oldObject": below, "userInfo": Streamed(3, nil)})})}
}

func TestProjectedDecodingKeepsOnlyWhatIsNamed(t *testing.T) {
	data := []byte(`{"request":{"uid":"u","object":{"apiVersion":"v1","metadata":{"labels":{"a":"b"},"managedFields":[{"x":1}],"name":"n"},"spec":{"x":[1,2]},"status":{"s":1e400}}}}`)
	p := Every(map[string]*Projection{"request": Every(map[string]*Projection{"object": Paths([]string{"metadata", "labels"}, []string{"spec"})})})
	_, _, err := DecodeProjected(data, p)
	if err == nil || !strings.Contains(err.Error(), "1e400") {
		t.Fatalf("a number out of range in a skipped member is refused as Decode refuses it, got %v", err)
	}
	data = []byte(strings.Replace(string(data), "1e400", "1e300", 1))
	got, _, err := DecodeProjected(data, p)
	if err != nil {
		t.Fatal(err)
	}
	want := ast.MustParseTerm(`{"request":{"uid":"u","object":{"metadata":{"labels":{"a":"b"}},"spec":{"x":[1,2]}}}}`).Value
	if got.Compare(want) != 0 {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestProjectedDecodingRefusesWhatDecodeRefuses(t *testing.T) {
	cases := map[string]string{
		"a key repeated in a skipped object":              `{"request":{"object":{"status":{"a":1,"a":2}}}}`,
		"a skipped key repeating a kept one":              `{"request":{"object":{"spec":{},"status":1,"spec":2}}}`,
		"a key repeated, once escaped, in a skipped part": `{"request":{"object":{"status":{"a":1,"\u0061":2}}}}`,
		"many keys in a skipped object, one repeated":     `{"request":{"object":{"status":` + largeObject(40, 7) + `}}}`,
		"an invalid escape in a skipped string":           `{"request":{"object":{"status":"\x"}}}`,
		"a control character in a skipped string":         "{\"request\":{\"object\":{\"status\":\"a\x01\"}}}",
		"a leading zero in a skipped number":              `{"request":{"object":{"status":01}}}`,
		"a huge integer in a skipped member":              `{"request":{"object":{"status":1` + strings.Repeat("0", 400) + `}}}`,
		"a bad literal in a skipped array":                `{"request":{"object":{"status":[tru]}}}`,
		"a skipped object cut short":                      `{"request":{"object":{"status":{"a":1`,
		"a missing colon in a skipped object":             `{"request":{"object":{"status":{"a" 1}}}}`,
		"deep nesting in a skipped member":                `{"request":{"object":{"status":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}}}`,
		"duplicates in kept and skipped parts, in order":  `{"request":{"object":{"status":{"b":1,"b":1},"spec":{"c":1,"c":1},"status":{}}}}`,
		"a valid document":                                `{"request":{"object":{"status":{"a":[1,-2.5e3,"\u00e9",null,true,false,{}]},"spec":{"a":1}}}}`,
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, p := range projectionsOf("spec;metadata.labels") {
				projectedAgrees(t, []byte(doc), p)
			}
		})
	}
}

func TestProjectionsCoverAndUnite(t *testing.T) {
	labels := Paths([]string{"metadata", "labels"})
	spec := Paths([]string{"spec"})
	both := Union(labels, spec)
	if got := both.String(); got != "{metadata:{labels},spec}" {
		t.Fatalf("union is %s", got)
	}
	whole := Paths([]string{})
	every := Every(map[string]*Projection{"status": Paths()})
	for name, c := range map[string]struct {
		p, q *Projection
		want bool
	}{
		"a union covers each side":                    {both, labels, true},
		"a side does not cover the union":             {labels, both, false},
		"the whole covers anything":                   {whole, both, true},
		"nothing named covers not the whole":          {both, whole, false},
		"all but status covers labels":                {every, labels, true},
		"labels does not cover all but status":        {labels, every, false},
		"all but status does not cover status whole":  {every, Paths([]string{"status"}), false},
		"a path covers a path below it":               {Paths([]string{"metadata"}), labels, true},
		"a path below does not cover the path above":  {labels, Paths([]string{"metadata"}), false},
		"nothing named is covered by any projection":  {labels, Paths(), true},
		"the union of whole and part is whole":        {Union(labels, whole), whole, true},
		"a union with every keeps the unnamed whole":  {Union(every, labels), Paths([]string{"spec"}), true},
		"a union with every keeps labels":             {Union(every, labels), labels, true},
		"a union with every keeps its status as told": {Union(every, labels), Paths([]string{"status"}), false},
	} {
		if got := c.p.Covers(c.q); got != c.want {
			t.Errorf("%s: %v covers %v = %v, want %v", name, c.p, c.q, got, c.want)
		}
	}
}

func TestProjectedDecodingAgreesOnEveryReviewFixture(t *testing.T) {
	for _, b := range reviewFixtures(t) {
		for _, spec := range []string{"", "*", "apiVersion;kind;metadata.labels;metadata.annotations;spec", "spec.hardware.arch", "metadata", "status;nothing.here"} {
			for _, p := range projectionsOf(spec) {
				projectedAgrees(t, b, p)
			}
		}
	}
}

func FuzzProjectedDecodingAgrees(f *testing.F) {
	for _, b := range reviewFixtures(f) {
		f.Add(b, "apiVersion;kind;metadata.labels;metadata.annotations;spec")
		f.Add(b, "spec.hardware.arch")
	}
	f.Add([]byte(`{"a":[1,1.5,-0,1e400,"\u00e9"],"a":null}`), "a")
	f.Add([]byte(`{"request":{"object":{"b":{"c":1,"c":2},"a":{"x":"\u0078"}}}}`), "a.x;c")
	f.Fuzz(func(t *testing.T, data []byte, spec string) {
		for _, p := range projectionsOf(spec) {
			projectedAgrees(t, data, p)
		}
	})
}
