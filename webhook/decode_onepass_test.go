package webhook

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// strictReview is the decoding the one-pass decoder must equal:
// sigs.k8s.io/json, strict and case-sensitive, duplicate keys refused.
func strictReview(body []byte) (*admissionv1.AdmissionReview, bool) {
	rev := &admissionv1.AdmissionReview{}
	strictErrs, err := kjson.UnmarshalStrict(body, rev, kjson.DisallowDuplicateFields)
	return rev, err == nil && len(strictErrs) == 0
}

// projections are the object reads the one-pass decoder is checked
// under: what the bundled policies read, and what the webhook itself does.
var projections = sync.OnceValue(func() []*policies.ObjectReads {
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{SkipTests: true})
	if err != nil {
		panic(err)
	}
	reads := policies.NewEngine(set, policies.EngineOptions{}).ObjectReads()
	return []*policies.ObjectReads{reads, policies.ContextObjectReads, reads.ForKind(podKind), reads.ForKind(quantumNodeKind)}
})

var (
	podKind         = policies.GroupVersionKind{Version: "v1", Kind: "Pod"}
	quantumNodeKind = policies.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"}
)

// A review's objects are decoded for what the policies may read of its
// kind, found in the body ahead of decoding: the bundled set reads a
// QuantumNode's spec, and nothing of a Pod's but the labels and
// annotations the webhook reads itself. FuzzDecodeAndAnswer's seeds (the
// load fixtures among them) hold the answers equal to decoding whole.
func TestObjectsAreDecodedForWhatTheirKindIsReadFor(t *testing.T) {
	set, err := policies.Load(context.Background(), rego.Bundled(), policies.LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	engine := policies.NewEngine(set, policies.EngineOptions{})
	if pod := engine.ObjectReads().ForKind(podKind); pod == engine.ObjectReads() || !engine.ObjectReads().Covers(pod) {
		t.Fatalf("a Pod's reads %v are not narrower than the set's %v", pod.Object, engine.ObjectReads().Object)
	}
	for _, c := range []struct {
		fixture  string
		wantSpec bool
	}{{"pod-create-5k.json", false}, {"realtime-create-allowed.json", true}, {"default-update-arch-denied.json", true}} {
		body, err := os.ReadFile(filepath.Join("../test/load/testdata", c.fixture))
		if err != nil {
			t.Fatal(err)
		}
		rev, objs, reqErr := decodeBody(body, DefaultMaxRequestElements, engine)
		if reqErr != nil {
			t.Fatalf("%s: %s", c.fixture, reqErr.message)
		}
		k := rev.Request.Kind
		if want := engine.ObjectReadsForKind(policies.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: k.Kind}); objs.reads != want {
			t.Fatalf("%s was decoded under %v, want its kind's %v", c.fixture, objs.reads.Object, want.Object)
		}
		if got := policies.ValueAt(objs.object, "spec") != nil; got != c.wantSpec {
			t.Errorf("%s: spec decoded %v, want %v (%v)", c.fixture, got, c.wantSpec, objs.object)
		}
		if policies.ValueAt(objs.object, "metadata", "labels") == nil {
			t.Errorf("%s: the labels the webhook reads were not decoded", c.fixture)
		}
	}
	// A body whose request names no kind the decoding takes is decoded
	// for any kind.
	if got := objectReadsForBody(engine, []byte(`{"request":{"uid":"u","object":{}}}`)); got != engine.ObjectReads() {
		t.Fatalf("without a kind: %v, want the set's reads", got.Object)
	}
}

// onePassAgrees checks that a body the one-pass decoder takes decodes to
// the same review under strict decoding, and that its objects are the
// values of their raw bytes; and that decoding the objects in part takes
// and refuses the same bodies, to the same review and the same values for
// what is read. It reports whether the one-pass decoder took the body.
func onePassAgrees(t *testing.T, body []byte) bool {
	t.Helper()
	rev, objs, ok := decodeReviewOnePass(body, nil)
	for _, reads := range projections() {
		inPart, partObjs, partOK := decodeReviewOnePass(body, reads)
		if partOK != ok {
			t.Fatalf("decoding the objects in part (%v) took the body: %v; whole: %v; %q", reads.Object, partOK, ok, body)
		}
		if !ok {
			continue
		}
		if !reflect.DeepEqual(inPart, rev) {
			t.Fatalf("in part %+v, whole %+v", inPart, rev)
		}
		for _, o := range []struct {
			part, whole ast.Value
			p           *astjson.Projection
		}{{partObjs.object, objs.object, reads.Object}, {partObjs.oldObject, objs.oldObject, reads.OldObject}} {
			if (o.part == nil) != (o.whole == nil) || (o.whole != nil && o.p.Apply(o.whole).Compare(o.part) != 0) {
				t.Fatalf("object decoded in part (%v) is %v, whole %v", o.p, o.part, o.whole)
			}
		}
	}
	if !ok {
		return false
	}
	want, strictOK := strictReview(body)
	if !strictOK {
		t.Fatalf("one pass took a body strict decoding refuses: %q", body)
	}
	if !reflect.DeepEqual(rev, want) {
		t.Fatalf("one pass %+v, strict %+v", rev, want)
	}
	if rev.Request == nil {
		return true
	}
	for _, o := range []struct {
		raw   []byte
		value ast.Value
	}{{rev.Request.Object.Raw, objs.object}, {rev.Request.OldObject.Raw, objs.oldObject}} {
		if len(o.raw) == 0 {
			if o.value != nil {
				t.Fatalf("an absent object has a value %v", o.value)
			}
			continue
		}
		v, err := astjson.Decode(o.raw)
		if err != nil || o.value == nil || v.Compare(o.value) != 0 {
			t.Fatalf("object value %v differs from its bytes' %v (%v)", o.value, v, err)
		}
	}
	return true
}

func TestOnePassDecodingTakesWhatTheAPIServerSends(t *testing.T) {
	var bodies []string
	for _, pattern := range []string{"../test/testdata/*.json", "../test/load/testdata/*.json"} {
		files, _ := filepath.Glob(pattern)
		bodies = append(bodies, files...)
	}
	if len(bodies) < 10 {
		t.Fatalf("only %d review fixtures found", len(bodies))
	}
	taken := 0
	for _, f := range bodies {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := strictReview(body); !ok {
			continue // a fixture of a malformed review
		}
		if !onePassAgrees(t, body) {
			t.Errorf("%s: a valid review went the slow way", f)
			continue
		}
		taken++
	}
	t.Logf("%d of %d fixtures decoded in one pass", taken, len(bodies))
}

func TestOnePassDecodingLeavesTheRestToTheStrictDecoder(t *testing.T) {
	base := reviewBody("CREATE", validObject)
	for name, body := range map[string]string{
		"an unknown field":                      strings.Replace(base, `"name":"edge-1"`, `"name":"edge-1","nmae":"x"`, 1),
		"a field in another case":               strings.Replace(base, `"namespace"`, `"Namespace"`, 1),
		"a duplicate field":                     strings.Replace(base, `"name":"edge-1"`, `"name":"edge-1","name":"edge-2"`, 1),
		"a duplicate inside the object":         strings.Replace(base, `"arch":"arm64"`, `"arch":"arm64","arch":"amd64"`, 1),
		"a duplicate in a part no policy reads": strings.Replace(base, `"namespace":"edge"},"spec"`, `"namespace":"edge","uid":"a","uid":"b"},"spec"`, 1),
		"a null name":                           strings.Replace(base, `"name":"edge-1"`, `"name":null`, 1),
		"a number for a string":                 strings.Replace(base, `"namespace":"edge"`, `"namespace":7`, 1),
		"an object that is an array":            reviewBody("CREATE", `[1,2]`),
		"a response beside the request":         strings.Replace(base, `"request":`, `"response":{"uid":"x","allowed":true},"request":`, 1),
		"groups that are not strings":           strings.Replace(base, `"groups":["edge-ops"]`, `"groups":["edge-ops",1]`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, ok := decodeReviewOnePass([]byte(body), nil); ok {
				t.Fatalf("one pass took %s", body)
			}
			for _, reads := range projections() {
				if _, _, ok := decodeReviewOnePass([]byte(body), reads); ok {
					t.Fatalf("one pass, the objects in part (%v), took %s", reads.Object, body)
				}
			}
		})
	}
	for name, body := range map[string]string{
		"the apiserver's form":     base,
		"a null oldObject":         strings.Replace(base, `"object":`, `"oldObject":null,"object":`, 1),
		"options and dryRun":       strings.Replace(base, `"object":`, `"dryRun":true,"options":{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"},"object":`, 1),
		"extra and an escaped key": strings.Replace(base, `"groups":["edge-ops"]`, `"groups":[],"extra":{"scopes":["a","b"],"none":[]},"u\u0069d":"u-1"`, 1),
		"whitespace around values": strings.Replace(base, `"object":`, "\"object\" : \n", 1),
	} {
		t.Run(name, func(t *testing.T) {
			if !onePassAgrees(t, []byte(body)) {
				t.Fatalf("one pass did not take %s", body)
			}
		})
	}
}

// FuzzOnePassDecodingAgrees: whatever the one-pass decoder takes, strict
// decoding takes too, to the same review.
func FuzzOnePassDecodingAgrees(f *testing.F) {
	addReviewSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		onePassAgrees(t, body)
	})
}
