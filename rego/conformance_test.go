package rego

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	oparego "github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/test/cases"
	opatestdata "github.com/open-policy-agent/opa/v1/test/cases/testdata"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/quantumnode/qn-admission/rego/planeval"
)

// conformanceUnplanned lists, one per line, the conformance cases the
// planned path does not run (they stay on topdown, or do not compile under
// qn-admission's capabilities), with the reason. The test fails when the
// list changes; UPDATE_CONFORMANCE=1 rewrites it.
const conformanceUnplanned = "testdata/conformance-unplanned.txt"

// TestPlannedEvaluationConformsToTopdown runs OPA's own Rego conformance
// cases (v1/test/cases/testdata of the OPA module we build with) through
// OPA's planner and rego/planeval, and through topdown, on the same compiled
// modules and data, and requires the same answer: the same result set, or
// an error from both. It is how OPA holds its Wasm target to topdown; here
// it holds the interpreter every user policy's answer depends on.
func TestPlannedEvaluationConformsToTopdown(t *testing.T) {
	all := loadConformanceCases(t)
	var unplanned []string
	planned, agreed := 0, 0
	for _, tc := range all {
		reason, disagreement := conformanceCase(tc)
		switch {
		case reason != "":
			unplanned = append(unplanned, tc.Filename+": "+tc.Note+": "+reason)
		case disagreement != "":
			planned++
			t.Errorf("%s: %s: %s", tc.Filename, tc.Note, disagreement)
		default:
			planned++
			agreed++
		}
	}
	t.Logf("%d conformance cases: %d planned, %d of them agree with topdown; %d not planned (%s)", len(all), planned, agreed, len(unplanned), conformanceUnplanned)
	sort.Strings(unplanned)
	got := strings.Join(unplanned, "\n") + "\n"
	if os.Getenv("UPDATE_CONFORMANCE") != "" {
		if err := os.WriteFile(conformanceUnplanned, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(conformanceUnplanned)
	if err != nil {
		t.Fatalf("%v (UPDATE_CONFORMANCE=1 writes it)", err)
	}
	if got != string(want) {
		wantLines, gotLines := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		for _, l := range gotLines {
			if !slices.Contains(wantLines, l) {
				t.Errorf("newly not planned: %s", l)
			}
		}
		for _, l := range wantLines {
			if !slices.Contains(gotLines, l) {
				t.Errorf("planned now (or reason changed), remove from %s: %s", conformanceUnplanned, l)
			}
		}
		t.Errorf("the cases the planned path does not run changed; if intended, rewrite the list with UPDATE_CONFORMANCE=1")
	}
}

// loadConformanceCases reads every case of OPA's v1 conformance suite.
func loadConformanceCases(t *testing.T) []cases.TestCase {
	t.Helper()
	var all []cases.TestCase
	err := fs.WalkDir(opatestdata.V1, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := fs.ReadFile(opatestdata.V1, path)
		if err != nil {
			return err
		}
		var set cases.Set
		if err := util.Unmarshal(b, &set); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, tc := range set.Cases {
			tc.Filename = filepath.ToSlash(path)
			all = append(all, tc)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 1000 {
		t.Fatalf("read %d conformance cases from OPA's module; expected thousands", len(all))
	}
	return all
}

// conformanceCase evaluates one case both ways. reason says why it was not
// planned; disagreement, when planned, how the answers differ.
func conformanceCase(tc cases.TestCase) (reason, disagreement string) {
	if len(tc.Env) > 0 {
		return "reads the environment (opa.runtime is not among the capabilities)", ""
	}
	mods := make([]Module, len(tc.Modules))
	for i, src := range tc.Modules {
		mods[i] = Module{Path: fmt.Sprintf("case-%d.rego", i), Source: src}
	}
	var data map[string]any
	if tc.Data != nil {
		data = *tc.Data
	}
	c, err := Compile(mods, data, CompileOptions{})
	if err != nil {
		return "does not compile here: " + firstLine(err), ""
	}
	var input ast.Value
	switch {
	case tc.InputTerm != nil:
		term, err := ast.ParseTerm(*tc.InputTerm)
		if err != nil {
			return "input term does not parse", ""
		}
		input = term.Value
	case tc.Input != nil:
		if input, err = ast.InterfaceToValue(*tc.Input); err != nil {
			return "input does not convert", ""
		}
	}
	program, err := c.planProgram(tc.Query)
	if err != nil {
		var unsupported *planeval.Unsupported
		if errors.As(err, &unsupported) {
			return "planeval: " + unsupported.Reason, ""
		}
		return "planner: " + firstLine(err), ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want, wantErr := topdownResults(ctx, c, tc.Query, input)
	var got []string
	results, gotErr := program.Eval(ctx, input)
	if gotErr == nil {
		got, gotErr = canonical(results)
	}
	switch {
	case wantErr != nil && gotErr != nil:
		return "", ""
	case wantErr != nil:
		return "", fmt.Sprintf("topdown fails (%s), planned evaluation answers %v", firstLine(wantErr), got)
	case gotErr != nil:
		return "", fmt.Sprintf("planned evaluation fails (%s), topdown answers %v", firstLine(gotErr), want)
	case !slices.Equal(got, want):
		return "", fmt.Sprintf("planned evaluation answers %v, topdown %v", got, want)
	}
	return "", ""
}

// topdownResults evaluates query with OPA's topdown, strict built-in
// errors on as the server runs, and returns its result set canonically.
func topdownResults(ctx context.Context, c *Compiled, query string, input ast.Value) ([]string, error) {
	c.evalModeMu.Lock()
	opts := []func(*oparego.Rego){
		oparego.Query(query), oparego.Compiler(c.compiler), oparego.Store(c.store), oparego.StrictBuiltinErrors(true),
	}
	if input != nil {
		opts = append(opts, oparego.ParsedInput(input))
	}
	pq, err := oparego.New(opts...).PrepareForEval(ctx)
	c.evalModeMu.Unlock()
	if err != nil {
		return nil, err
	}
	rs, err := pq.Eval(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		b, err := json.Marshal(userBindings(r.Bindings))
		if err != nil {
			return nil, err
		}
		out = append(out, canonicalJSON(b))
	}
	sort.Strings(out)
	return out, nil
}

// canonical turns planeval's result set (one object of bindings per
// result) into sorted canonical JSON, without generated variables.
func canonical(results []*ast.Term) ([]string, error) {
	out := make([]string, 0, len(results))
	for _, r := range results {
		v, err := ast.JSON(r.Value)
		if err != nil {
			return nil, err
		}
		m, _ := v.(map[string]any)
		b, err := json.Marshal(userBindings(m))
		if err != nil {
			return nil, err
		}
		out = append(out, canonicalJSON(b))
	}
	sort.Strings(out)
	return out, nil
}

// userBindings drops the variables the compiler generated.
func userBindings(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if strings.HasPrefix(k, "__") || strings.HasPrefix(k, "$") {
			continue
		}
		out[k] = v
	}
	return out
}

// canonicalJSON re-encodes JSON with sorted object keys (encoding/json
// sorts map keys), so equal values compare equal.
func canonicalJSON(b []byte) string {
	var v any
	if err := util.UnmarshalJSON(b, &v); err != nil {
		return string(b)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(b)
	}
	return string(out)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
