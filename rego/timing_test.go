package rego

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

// EvalTimed answers as Eval does and times every package of the query, in
// the order the query evaluates them, each within the evaluation and after
// the one before.
func TestEvalTimedTimesEachPackage(t *testing.T) {
	c, err := Compile([]Module{
		{Path: "a.rego", Source: "package a\ndeny contains \"a says no\" if input.x == 1\nwarn contains \"a warns\" if true\n"},
		// A package that takes a while, so its time is visible.
		{Path: "slow.rego", Source: "package team.slow\ndeny contains \"slow says no\" if { count([n | some n in numbers.range(1, 20000); n % 7 == 0]) > 0; input.x == 1 }\n"},
		{Path: "b.rego", Source: "package b\npatch contains {\"op\": \"add\", \"path\": \"/metadata/labels/b\", \"value\": \"1\"} if true\n"},
	}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"a", "team.slow", "b"}, AllRules, time.Minute) // the slow package is slow on purpose; -race on a busy machine multiplies it
	if err != nil {
		t.Fatal(err)
	}
	for _, input := range []string{`{"x": 1}`, `{"x": 2}`} {
		want, err := q.Eval(context.Background(), mustInput(t, input))
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		got, times, err := q.EvalTimed(context.Background(), mustInput(t, input))
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("input %s: EvalTimed %+v, Eval %+v", input, got, want)
		}
		var names []string
		for i, pt := range times {
			names = append(names, pt.Package)
			if pt.Start.Before(before) || pt.End.After(after) || pt.End.Before(pt.Start) {
				t.Errorf("%s: %s–%s is not within the evaluation", pt.Package, pt.Start, pt.End)
			}
			if i > 0 && pt.Start.Before(times[i-1].End) {
				t.Errorf("%s starts before %s ends", pt.Package, times[i-1].Package)
			}
		}
		if strings.Join(names, ",") != "a,team.slow,b" {
			t.Fatalf("input %s: packages timed %v, want a, team.slow, b", input, names)
		}
		// With x=2 rule indexing skips the slow rule (its body tests input.x).
		if slow := times[1].End.Sub(times[1].Start); input == `{"x": 1}` && slow < times[0].End.Sub(times[0].Start) {
			t.Errorf("the slow package took %s, less than package a (%s)", slow, times[0].End.Sub(times[0].Start))
		}
	}
}

// An evaluation error is Eval's, with the packages timed up to it.
func TestEvalTimedReportsErrorsAsEval(t *testing.T) {
	c, err := Compile([]Module{{Path: "p.rego", Source: "package p\ndeny contains msg if { msg := sprintf(\"%d\", input.x) }\n"}}, nil, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Prepare(context.Background(), []string{"p"}, AllRules, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, wantErr := q.Eval(context.Background(), mustInput(t, `{"x": {}}`))
	_, _, err = q.EvalTimed(context.Background(), mustInput(t, `{"x": {}}`))
	if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
		t.Errorf("EvalTimed error %v, Eval error %v: want the same", err, wantErr)
	}
}
