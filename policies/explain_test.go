package policies

import (
	"context"
	"testing"
)

func TestExplainFollowsTheDecisionStepByStep(t *testing.T) {
	ctx := context.Background()
	cases := map[string]struct {
		in    node
		path  Path
		check func(t *testing.T, x *Explanation, d Decision)
	}{
		"an exempt namespace stops before the role": {
			in: node{namespace: "kube-system"},
			check: func(t *testing.T, x *Explanation, d Decision) {
				if x.Exempt != "namespace kube-system" || x.Evaluated || d.Exempt != x.Exempt {
					t.Errorf("explanation %+v, decision %+v", x, d)
				}
			},
		},
		"an unknown role is named and nothing runs": {
			in: node{role: "fast"},
			check: func(t *testing.T, x *Explanation, d Decision) {
				if x.RoleKnown || !x.RoleFromAnnotation || x.Role != "fast" || x.Evaluated || d.Allowed {
					t.Errorf("explanation %+v", x)
				}
			},
		},
		"an operation the role may not perform stops before policies": {
			in: node{role: "batch", op: "UPDATE"},
			check: func(t *testing.T, x *Explanation, d Decision) {
				if !x.RoleKnown || x.OperationAllowed || x.Evaluated || d.Allowed {
					t.Errorf("explanation %+v", x)
				}
			},
		},
		"the default role, its window before the request and the entries of its packages": {
			in: node{},
			check: func(t *testing.T, x *Explanation, d Decision) {
				if x.RoleFromAnnotation || x.Role != "default" || !x.Evaluated || x.WindowKey != "default/user/"+subjectHash("alice") {
					t.Fatalf("explanation %+v", x)
				}
				if x.Window.Count != 0 || d.Window.Count != 1 {
					t.Errorf("explain sees the window before the request (%d), the decision after it (%d)", x.Window.Count, d.Window.Count)
				}
				if len(x.Firings) == 0 || len(x.Trace) == 0 {
					t.Errorf("no firings or trace")
				}
			},
		},
		"a realtime denial is attributed to the realtime package": {
			in: node{role: "realtime", labels: shanghai},
			check: func(t *testing.T, x *Explanation, d Decision) {
				found := false
				for _, f := range x.Firings {
					if f.Package == "qn.roles.realtime" && f.Rule == "deny" && f.Entry && f.File == "realtime.rego" && f.Line > 0 {
						found = true
					}
				}
				if !found || len(x.Result.Deny) != len(d.Reasons) {
					t.Errorf("firings %+v, result %+v, reasons %q", x.Firings, x.Result, d.Reasons)
				}
			},
		},
		"the mutating path evaluates patch rules and no window": {
			in:   node{},
			path: PathMutate,
			check: func(t *testing.T, x *Explanation, d Decision) {
				if x.Window != nil || len(x.Result.Patch) != 1 || d.PatchOps != 1 {
					t.Errorf("explanation %+v, decision %+v", x, d)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, _ := stepped(t, nil)
			in := tc.in.input()
			x, err := e.Explain(ctx, in, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			var d Decision
			if tc.path == PathMutate {
				d = e.Mutate(ctx, in)
			} else {
				d = e.Validate(ctx, in)
			}
			tc.check(t, x, d)
		})
	}
}

func TestExplainOnlyPeeksAtTheWindow(t *testing.T) {
	ctx := context.Background()
	e, _ := stepped(t, nil)
	for i := 0; i < 5; i++ {
		if _, err := e.Explain(ctx, node{uid: "u"}.input(), PathValidate); err != nil {
			t.Fatal(err)
		}
	}
	x, err := e.Explain(ctx, node{}.input(), PathValidate)
	if err != nil {
		t.Fatal(err)
	}
	if x.Window.Count != 0 {
		t.Errorf("explaining took %d slots", x.Window.Count)
	}
}
