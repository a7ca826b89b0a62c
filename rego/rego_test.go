package rego

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

func compileBundled(t *testing.T) *Compiled {
	t.Helper()
	mods, err := ReadModules(Bundled())
	if err != nil {
		t.Fatal(err)
	}
	// Role parameters come from roles.yaml through the policies package;
	// these tests only need the set to compile.
	c, err := Compile(mods, map[string]any{"roles": map[string]any{}}, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFailingRegoTestIsReported(t *testing.T) {
	c, err := Compile([]Module{{Path: "p_test.rego", Source: "package p_test\ntest_ok if true\ntest_broken if 1 == 2\n"}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	results, err := c.RunTests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	failed := FailedTests(results)
	if len(results) != 2 || len(failed) != 1 || failed[0].Name != "test_broken" || failed[0].Location != "p_test.rego:3" {
		t.Fatalf("want test_broken reported at p_test.rego:3, got %+v", results)
	}
}

func TestCompileErrors(t *testing.T) {
	cases := map[string]struct {
		source string
		opts   CompileOptions
		want   string
	}{
		"a syntax error names the file and line": {
			source: "package p\n\ndeny contains x if {\n",
			want:   "broken.rego:4: rego_parse_error",
		},
		"http.send is unavailable by default": {
			source: "package p\n\nr := http.send({\"method\": \"get\", \"url\": \"http://x\"})\n",
			want:   "undefined function http.send",
		},
		"net.lookup_ip_addr is unavailable by default": {
			source: "package p\n\nr := net.lookup_ip_addr(\"example.com\")\n",
			want:   "undefined function net.lookup_ip_addr",
		},
		"an unsafe variable names the file and line": {
			source: "package p\n\ndeny contains x if { y := 1 }\n",
			want:   "broken.rego:3",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Compile([]Module{{Path: "broken.rego", Source: tc.source}}, nil, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestNetworkBuiltinsCanBeEnabled(t *testing.T) {
	src := "package p\n\nr := http.send({\"method\": \"get\", \"url\": \"http://x\"}) if false\n"
	if _, err := Compile([]Module{{Path: "net.rego", Source: src}}, nil, CompileOptions{AllowNetwork: true}); err != nil {
		t.Fatalf("with AllowNetwork, http.send should compile: %v", err)
	}
}

func TestPrepareRejectsUnknownPackage(t *testing.T) {
	c := compileBundled(t)
	_, err := c.Prepare(context.Background(), []string{"qn.quantumnode", "qn.nope"}, AllRules, 0)
	if err == nil || !strings.Contains(err.Error(), `package "qn.nope" is not declared`) || !strings.Contains(err.Error(), "qn.quantumnode") {
		t.Fatalf("want an error naming the missing package and the known ones, got %v", err)
	}
}

func mustInput(t *testing.T, js string) ast.Value {
	t.Helper()
	v, err := ast.ValueFromReader(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestEvalUnionsPackagesInOnePass(t *testing.T) {
	c, err := Compile([]Module{
		{Path: "a.rego", Source: "package a\ndeny contains \"a says no\" if input.x == 1\nwarn contains {\"msg\": \"a warns\"} if true\n"},
		{Path: "b.rego", Source: "package b\ndeny contains \"b says no\" if input.x == 1\npatch contains {\"op\": \"add\", \"path\": \"/metadata/labels/b\", \"value\": \"1\"} if true\n"},
		{Path: "c.rego", Source: "package c\ndeny contains \"c is not in the role\" if true\n"},
	}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"a", "b"}, AllRules, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Eval(context.Background(), mustInput(t, `{"x": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Deny, "|") != "a says no|b says no" || strings.Join(res.Warn, "|") != "a warns" {
		t.Fatalf("unexpected deny/warn: %+v", res)
	}
	if len(res.Patch) != 1 || res.Patch[0].Path != "/metadata/labels/b" || res.Patch[0].Value != "1" {
		t.Fatalf("unexpected patch: %+v", res.Patch)
	}
	res, err = q.Eval(context.Background(), mustInput(t, `{"x": 2}`))
	if err != nil || len(res.Deny) != 0 {
		t.Fatalf("with x=2 nothing should deny: %+v %v", res, err)
	}
}

func TestEvalErrors(t *testing.T) {
	cases := map[string]struct {
		source string
		want   string
	}{
		"a deny entry of the wrong type": {
			source: "package p\ndeny contains 42 if true\n",
			want:   "a deny entry must be a string or an object with \"msg\"",
		},
		"a patch with an unknown op": {
			source: "package p\npatch contains {\"op\": \"merge\", \"path\": \"/a\", \"value\": 1} if true\n",
			want:   `unknown op "merge"`,
		},
		"a patch path that is not a pointer": {
			source: "package p\npatch contains {\"op\": \"add\", \"path\": \"a\", \"value\": 1} if true\n",
			want:   `path "a"`,
		},
		"a builtin error is an error, not an empty set": {
			source: "package p\ndeny contains msg if { msg := sprintf(\"%d\", input.notarray) }\n",
			want:   "evaluate packages [p]",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := Compile([]Module{{Path: "p.rego", Source: tc.source}}, nil, CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			q, err := c.Prepare(context.Background(), []string{"p"}, AllRules, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_, err = q.Eval(context.Background(), mustInput(t, `{"notarray": 1}`))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestEvalDeadline(t *testing.T) {
	// A deliberately expensive rule: 10^10 iterations never finish in 20ms.
	src := "package slow\ndeny contains \"never\" if { some i in numbers.range(1, 100000); some j in numbers.range(1, 100000); i == j + 100000 }\n"
	c, err := Compile([]Module{{Path: "slow.rego", Source: src}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"slow"}, AllRules, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Eval(context.Background(), mustInput(t, `{}`))
	if !errors.Is(err, ErrEvalTimeout) {
		t.Fatalf("want ErrEvalTimeout, got %v", err)
	}
}

// TestEvalDeadlineStopsBuiltins: the deadline stops a long built-in, not
// only the steps between built-ins, on both evaluators. numbers.range of 20
// million numbers runs for seconds and takes gigabytes when nothing stops it.
func TestEvalDeadlineStopsBuiltins(t *testing.T) {
	src := "package slow\ndeny contains \"never\" if { count(numbers.range(1, 20000000)) == 0 }\n"
	c, err := Compile([]Module{{Path: "slow.rego", Source: src}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"slow"}, AllRules, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.program(); err != nil {
		t.Fatalf("the query must run on the planned path: %v", err)
	}
	for name, eval := range bothEvaluators(q, mustInput(t, `{}`)) {
		t.Run(name, func(t *testing.T) {
			began := time.Now()
			err := eval()
			took := time.Since(began)
			if !errors.Is(err, ErrEvalTimeout) {
				t.Fatalf("want ErrEvalTimeout, got %v", err)
			}
			// Unstopped, the built-in takes seconds; stopped, it ends within
			// a poll of the deadline. The bound is loose for loaded machines.
			if took > 2*time.Second {
				t.Fatalf("a 50ms deadline answered after %s: the built-in ran on", took)
			}
			t.Logf("stopped after %s: %v", took, err)
		})
	}
}

// TestNetworkBuiltinsAnswerAndStopAtTheirDeadline: with network built-ins
// allowed, http.send answers (the planned evaluator leaves plans that call
// it to topdown, whose built-in context it needs: under the planned one it
// panicked), and a request that hangs is stopped by the evaluation's
// deadline, which it waits on through its context.
func TestNetworkBuiltinsAnswerAndStopAtTheirDeadline(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	defer close(hang)
	src := "package net\ndeny contains sprintf(\"status %d\", [http.send({\"method\": \"get\", \"url\": input.url}).status_code])\n"
	c, err := Compile([]Module{{Path: "net.rego", Source: src}}, nil, CompileOptions{AllowNetwork: true})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"net"}, AllRules, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Eval(context.Background(), mustInput(t, `{"url": "`+srv.URL+`/teapot"}`))
	if err != nil || !slices.Equal(res.Deny, []string{"status 418"}) {
		t.Fatalf("http.send to a server that answers: %v, %v; want the denial \"status 418\"", res.Deny, err)
	}
	began := time.Now()
	_, err = q.Eval(context.Background(), mustInput(t, `{"url": "`+srv.URL+`/hang"}`))
	took := time.Since(began)
	if !errors.Is(err, ErrEvalTimeout) {
		t.Fatalf("http.send to a server that hangs: want ErrEvalTimeout, got %v after %s", err, took)
	}
	if took > 3*time.Second {
		t.Fatalf("a 200ms deadline answered after %s: http.send waited on", took)
	}
}

// TestSchemaReferencesFetchNothingWithoutNetwork: without network
// built-ins, a JSON schema's remote reference is refused, on the planned
// path as under topdown (which take the compiler's capabilities, whose
// allow_net then lists no host): otherwise a schema built from a review
// could make qn-webhook fetch any URL.
func TestSchemaReferencesFetchNothingWithoutNetwork(t *testing.T) {
	var fetched atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		_, _ = w.Write([]byte(`{"type": "string"}`))
	}))
	defer srv.Close()
	src := "package schema\ndeny contains \"invalid\" if { [ok, _] := json.match_schema(input.doc, {\"$ref\": input.ref}); not ok }\n"
	c, err := Compile([]Module{{Path: "schema.rego", Source: src}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"schema"}, AllRules, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	program, err := q.program()
	if err != nil {
		t.Fatalf("the query must run on the planned path: %v", err)
	}
	if !slices.Contains(program.ContextBuiltins(), "json.match_schema") {
		t.Fatalf("the plan's context built-ins %v do not name json.match_schema", program.ContextBuiltins())
	}
	in := mustInput(t, `{"doc": {"a": 1}, "ref": "`+srv.URL+`/s.json"}`)
	for name, eval := range bothEvaluators(q, in) {
		t.Run(name, func(t *testing.T) {
			before := fetched.Load()
			err := eval()
			if got := fetched.Load() - before; got != 0 {
				t.Fatalf("the schema's reference was fetched %d times (error %v)", got, err)
			}
			if err == nil {
				t.Fatal("a schema whose reference may not be fetched was judged without an error")
			}
			t.Logf("refused: %v", err)
		})
	}
}

func TestDataIsVisibleToPolicies(t *testing.T) {
	c, err := Compile([]Module{{Path: "z.rego", Source: "package z\ndeny contains \"zone not allowed\" if not input.zone in data.zones\n"}},
		map[string]any{"zones": []any{"cn-shanghai"}}, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"z"}, AllRules, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for zone, wantDenied := range map[string]bool{"cn-shanghai": false, "eu-west": true} {
		res, err := q.Eval(context.Background(), mustInput(t, `{"zone": "`+zone+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		if (len(res.Deny) > 0) != wantDenied {
			t.Errorf("zone %s: denied=%v, want %v", zone, len(res.Deny) > 0, wantDenied)
		}
	}
}

// bothEvaluators evaluates q on input by the planned path (Eval) and by
// topdown (EvalTimed, the path of a traced request), by name.
func bothEvaluators(q *Query, input ast.Value) map[string]func() error {
	return map[string]func() error{
		"planned": func() error { _, err := q.Eval(context.Background(), input); return err },
		"topdown": func() error { _, _, err := q.EvalTimed(context.Background(), input); return err },
	}
}
