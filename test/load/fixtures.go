package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Expect is the decision a judging target must give for a fixture on one
// webhook path.
type Expect struct {
	Allowed bool
	// Patched says a mutating answer must carry a JSONPatch that sets the
	// label qn.dev/managed-by=qn-admission; false says it must carry none.
	Patched bool
}

// expectations are the bundled policies' decisions for every fixture in
// testdata/, on the validating and the mutating path. LoadFixtures refuses
// a fixture without an entry and an entry without a fixture.
var expectations = map[string]struct{ Validate, Mutate Expect }{
	"realtime-create-allowed.json":    {Expect{Allowed: true}, Expect{Allowed: true, Patched: true}},
	"realtime-create-denied.json":     {Expect{Allowed: false}, Expect{Allowed: true, Patched: true}},
	"realtime-update-allowed.json":    {Expect{Allowed: true}, Expect{Allowed: true}},
	"batch-create-allowed.json":       {Expect{Allowed: true}, Expect{Allowed: true, Patched: true}},
	"batch-create-denied.json":        {Expect{Allowed: false}, Expect{Allowed: true, Patched: true}},
	"default-create-allowed.json":     {Expect{Allowed: true}, Expect{Allowed: true, Patched: true}},
	"default-create-denied.json":      {Expect{Allowed: false}, Expect{Allowed: true, Patched: true}},
	"default-update-arch-denied.json": {Expect{Allowed: false}, Expect{Allowed: true}},
	"pod-create-5k.json":              {Expect{Allowed: true}, Expect{Allowed: true}},
}

// Fixture is one AdmissionReview request from testdata/, ready to be sent
// many times with a fresh uid and a chosen user each time.
type Fixture struct {
	Name     string
	Validate Expect
	Mutate   Expect
	// Object is request.object as sent, to apply a returned patch to.
	Object json.RawMessage
	// Size is the compact body size in bytes (uid and user as in the file).
	Size     int
	template template
}

// DefaultFixtureDir is testdata/ next to this package, for callers that run
// from the module root (cmd/qnload) or from the package (its tests).
func DefaultFixtureDir(moduleRoot string) string {
	return filepath.Join(moduleRoot, "test", "load", "testdata")
}

// LoadFixtures reads every *.json review in dir. Each must be an
// admission.k8s.io/v1 AdmissionReview with a request.uid and a
// request.userInfo.username, and must have an expectation.
func LoadFixtures(dir string) ([]*Fixture, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no fixtures (*.json) in %s", dir)
	}
	var out []*Fixture
	seen := map[string]bool{}
	for _, p := range paths {
		name := filepath.Base(p)
		exp, ok := expectations[name]
		if !ok {
			return nil, fmt.Errorf("fixture %s has no expected decision: add it to expectations in fixtures.go", p)
		}
		seen[name] = true
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f, err := parseFixture(name, data)
		if err != nil {
			return nil, fmt.Errorf("fixture %s: %w", p, err)
		}
		f.Validate, f.Mutate = exp.Validate, exp.Mutate
		out = append(out, f)
	}
	for name := range expectations {
		if !seen[name] {
			return nil, fmt.Errorf("expectations name %s, which is not in %s", name, dir)
		}
	}
	slices.SortFunc(out, func(a, b *Fixture) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Fixture bodies carry these markers where each request puts its own uid
// and user; neither can occur in real JSON text we send.
const (
	uidMarker  = "@@qnload-uid@@"
	userMarker = "@@qnload-user@@"
)

func parseFixture(name string, data []byte) (*Fixture, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // keep numbers as written
	var review map[string]any
	if err := dec.Decode(&review); err != nil {
		return nil, err
	}
	if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
		return nil, errors.New("not an admission.k8s.io/v1 AdmissionReview")
	}
	req, _ := review["request"].(map[string]any)
	if req == nil {
		return nil, errors.New("no request")
	}
	if uid, _ := req["uid"].(string); uid == "" {
		return nil, errors.New("no request.uid")
	}
	user, _ := req["userInfo"].(map[string]any)
	if name, _ := user["username"].(string); name == "" {
		return nil, errors.New("no request.userInfo.username")
	}
	f := &Fixture{Name: name}
	if obj, ok := req["object"]; ok && obj != nil {
		raw, err := marshalCompact(obj)
		if err != nil {
			return nil, err
		}
		f.Object = raw
	}
	compact, err := marshalCompact(review)
	if err != nil {
		return nil, err
	}
	f.Size = len(compact)
	req["uid"] = uidMarker
	user["username"] = userMarker
	marked, err := marshalCompact(review)
	if err != nil {
		return nil, err
	}
	if f.template, err = newTemplate(marked); err != nil {
		return nil, err
	}
	return f, nil
}

// marshalCompact encodes v without HTML escaping, as the apiserver does.
func marshalCompact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Call is one kind of request in a mix: a fixture sent to the validating or
// the mutating webhook.
type Call struct {
	Fixture  *Fixture
	Mutating bool
}

// Expect is what a judging target must answer to this call.
func (c Call) Expect() Expect {
	if c.Mutating {
		return c.Fixture.Mutate
	}
	return c.Fixture.Validate
}

func (c Call) String() string {
	if c.Mutating {
		return "mutate " + c.Fixture.Name
	}
	return "validate " + c.Fixture.Name
}

// Mix sends every fixture in turn to one webhook path.
func Mix(fixtures []*Fixture, mutating bool) []Call {
	calls := make([]Call, len(fixtures))
	for i, f := range fixtures {
		calls[i] = Call{Fixture: f, Mutating: mutating}
	}
	return calls
}
