package policies

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	authenticationv1 "k8s.io/api/authentication/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

var t0 = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

// stepped returns an engine over set whose windows run on a fake clock.
func stepped(t *testing.T, fsys fstest.MapFS) (*Engine, *clocktesting.FakePassiveClock) {
	t.Helper()
	var set *Set
	var err error
	if fsys == nil {
		set, err = Load(context.Background(), rego.Bundled(), LoadOptions{})
	} else {
		set, err = Load(context.Background(), fsys, LoadOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(t0)
	return NewEngine(set, EngineOptions{Windows: window.NewMemoryStore(clk, window.MemoryOptions{})}), clk
}

// node is a QuantumNode input for the bundled role table. On UPDATE the
// stored object is the same node under oldRole ("" keeps role, "-" stores
// it without the annotation).
type node struct {
	op, role, oldRole, user, namespace, uid string
	groups                                  []string
	labels, annotations                     map[string]string
	dryRun                                  bool
	noOldObject                             bool
}

func (n node) input() *Input {
	obj := map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
		"metadata": map[string]any{"name": "edge-1"},
		"spec": map[string]any{
			"hardware": map[string]any{"arch": "arm64"},
			"services": []any{map[string]any{"name": "mqtt", "port": int64(8883)}},
		},
	}
	annotations := map[string]string{}
	for k, v := range n.annotations {
		annotations[k] = v
	}
	if n.role != "" {
		annotations[RoleAnnotation] = n.role
	}
	labels := n.labels
	if labels == nil {
		labels = map[string]string{}
	}
	meta := obj["metadata"].(map[string]any)
	meta["labels"], meta["annotations"] = toAny(labels), toAny(annotations)
	in := qnInput(orDefault(n.op, "CREATE"), "", "")
	in.Object = obj
	switch in.Facts.Operation {
	case "DELETE":
		in.Object, in.OldObject = nil, obj
	case "UPDATE":
		old := deepCopy(obj)
		oldAnnotations := old["metadata"].(map[string]any)["annotations"].(map[string]any)
		switch n.oldRole {
		case "":
		case "-":
			delete(oldAnnotations, RoleAnnotation)
		default:
			oldAnnotations[RoleAnnotation] = n.oldRole
		}
		in.OldObject = old
	}
	if n.noOldObject {
		in.OldObject = nil
	}
	in.Facts.Groups = []string{"system:authenticated"}
	if n.groups != nil {
		in.Facts.Groups = n.groups
	}
	in.Facts.User = orDefault(n.user, "alice")
	in.Facts.Namespace = orDefault(n.namespace, "edge")
	in.Facts.UID = orDefault(n.uid, fmt.Sprintf("uid-%d", time.Now().UnixNano()))
	in.Request.UID = "x"
	in.Facts.Labels, in.Facts.Annotations = labels, annotations
	in.Facts.Role = n.role
	in.Facts.DryRun = n.dryRun
	return in
}

func deepCopy(obj map[string]any) map[string]any {
	js, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(js, &out); err != nil {
		panic(err)
	}
	return out
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

var (
	shanghai = map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"}
	fast     = map[string]string{"qn.dev/latency-budget-ms": "20"}
)

func TestTheRoleTable(t *testing.T) {
	cases := map[string]struct {
		n           node
		wantAllowed bool
		wantCode    int32
		wantMessage string
	}{
		"realtime admits a fast node in an allowed zone": {
			n: node{role: "realtime", labels: shanghai, annotations: fast}, wantAllowed: true, wantCode: 200,
		},
		"realtime may update": {
			n: node{op: "UPDATE", role: "realtime", labels: shanghai, annotations: fast}, wantAllowed: true, wantCode: 200,
		},
		"realtime refuses a node without a latency budget": {
			n: node{role: "realtime", labels: shanghai}, wantCode: 403,
			wantMessage: `denied by qn-admission (role "realtime"): realtime QuantumNodes must declare annotation qn.dev/latency-budget-ms (a latency budget in milliseconds, below 50)`,
		},
		"realtime refuses a budget of 50 ms or more": {
			n: node{role: "realtime", labels: shanghai, annotations: map[string]string{"qn.dev/latency-budget-ms": "80"}}, wantCode: 403,
			wantMessage: "latency budget 80 ms (annotation qn.dev/latency-budget-ms) is not below the realtime maximum of 50 ms",
		},
		"realtime refuses a zone outside its allowed zones": {
			n: node{role: "realtime", labels: map[string]string{"topology.kubernetes.io/zone": "eu-west-1"}, annotations: fast}, wantCode: 403,
			wantMessage: `zone "eu-west-1" (label topology.kubernetes.io/zone) is not allowed for realtime; allowed zones: cn-shanghai`,
		},
		"realtime nodes are deleted only by cluster admins": {
			n: node{op: "DELETE", role: "realtime"}, wantCode: 403,
			wantMessage: `user "alice" (groups system:authenticated) may not delete a QuantumNode of role "realtime": roles.realtime.delete admits groups system:masters`,
		},
		"batch admits a low-priority create": {
			n: node{role: "batch", labels: map[string]string{"priority": "low"}}, wantAllowed: true, wantCode: 200,
		},
		"batch refuses a create without priority=low": {
			n: node{role: "batch"}, wantCode: 403,
			wantMessage: `denied by qn-admission (role "batch"): batch QuantumNodes must carry label priority=low (found no priority label)`,
		},
		"batch may not update": {
			n: node{op: "UPDATE", role: "batch", labels: map[string]string{"priority": "low"}}, wantCode: 403,
			wantMessage: `the stored QuantumNode is under role "batch", which may not update it (it may CREATE)`,
		},
		"default admits a delete": {
			n: node{op: "DELETE"}, wantAllowed: true, wantCode: 200,
		},
		"default applies only the common rules": {
			n: node{}, wantAllowed: true, wantCode: 200,
		},
		"an unknown role is refused with the known roles listed": {
			n: node{role: "turbo"}, wantCode: 403,
			wantMessage: `annotation qn-role="turbo" names no known role; known roles: batch, default, realtime`,
		},
		"kube-system is exempt": {
			n: node{role: "turbo", namespace: "kube-system"}, wantAllowed: true, wantCode: 200,
		},
	}
	e, _ := stepped(t, nil)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := e.Validate(context.Background(), tc.n.input())
			if d.Allowed != tc.wantAllowed || d.Code != tc.wantCode || !strings.Contains(d.Message, tc.wantMessage) {
				t.Fatalf("got allowed=%v code=%d message %q\nwant allowed=%v code=%d message containing %q", d.Allowed, d.Code, d.Message, tc.wantAllowed, tc.wantCode, tc.wantMessage)
			}
		})
	}
}

func TestRealtimeWindowEdges(t *testing.T) {
	e, clk := stepped(t, nil)
	ctx := context.Background()
	rt := node{role: "realtime", labels: shanghai, annotations: fast}
	take := func(uid string) Decision {
		n := rt
		n.uid = uid
		return e.Validate(ctx, n.input())
	}
	for i := 1; i <= 120; i++ {
		clk.SetTime(t0.Add(time.Duration(i) * 100 * time.Millisecond)) // 120 changes over 12 s
		if d := take(fmt.Sprintf("u%d", i)); !d.Allowed {
			t.Fatalf("change %d of 120 should be admitted: %s", i, d.Message)
		}
	}
	d := take("u121")
	want := `rate window full: role "realtime" allows 120 changes per 1m0s per user; user "alice" has made 120 in the last 1m0s; a slot frees in 48.1s`
	if d.Allowed || d.Code != 429 || d.Reason != "TooManyRequests" || d.Message != want {
		t.Fatalf("the 121st change must be refused with 429:\n got %d %s %q\nwant 429 TooManyRequests %q", d.Code, d.Reason, d.Message, want)
	}
	if d.Window == nil || d.Window.Count != 120 || d.Window.Remaining != 0 {
		t.Fatalf("the decision should carry the full window, got %+v", d.Window)
	}
	// A retry of an admitted request (same uid) does not take another slot.
	if d := take("u120"); !d.Allowed {
		t.Fatalf("a retried uid that already holds a slot is admitted again: %s", d.Message)
	}
	// The oldest entry (t0+100ms) leaves the window at t0+60.1s: exactly one slot frees.
	clk.SetTime(t0.Add(60*time.Second + 99*time.Millisecond))
	if d := take("u122"); d.Allowed {
		t.Fatal("1ms before the oldest entry leaves, the window is still full")
	}
	clk.SetTime(t0.Add(60*time.Second + 100*time.Millisecond))
	if d := take("u123"); !d.Allowed {
		t.Fatalf("when the oldest entry leaves, one slot frees: %s", d.Message)
	}
	if d := take("u124"); d.Allowed || d.Code != 429 {
		t.Fatal("and only one")
	}
	// Another user has a window of their own.
	bob := rt
	bob.user = "bob"
	if d := e.Validate(ctx, bob.input()); !d.Allowed {
		t.Fatalf("bob's window is separate: %s", d.Message)
	}
}

func TestWindowIgnoresDryRunsAndDeniedRequests(t *testing.T) {
	e, _ := stepped(t, nil)
	ctx := context.Background()
	batch := node{role: "batch", labels: map[string]string{"priority": "low"}}
	for i := 0; i < 50; i++ {
		n := batch
		n.dryRun = true
		if d := e.Validate(ctx, n.input()); !d.Allowed {
			t.Fatalf("dry run %d: %s", i, d.Message)
		}
		if d := e.Validate(ctx, node{role: "batch"}.input()); d.Allowed || d.Code != 403 {
			t.Fatalf("a request the policies deny is refused with 403, not counted: %+v", d)
		}
	}
	for i := 1; i <= 30; i++ {
		if d := e.Validate(ctx, batch.input()); !d.Allowed {
			t.Fatalf("change %d of 30: dry runs and denials must not have used slots: %s", i, d.Message)
		}
	}
	if d := e.Validate(ctx, batch.input()); d.Code != 429 {
		t.Fatalf("the 31st batch change is refused: %+v", d)
	}
	dry := batch
	dry.dryRun = true
	if d := e.Validate(ctx, dry.input()); d.Code != 429 {
		t.Fatalf("a dry run against a full window shows the refusal it would get: %+v", d)
	}
}

func windowedSet(key string, extra string) fstest.MapFS {
	return fstest.MapFS{
		"roles.yaml": {Data: []byte(fmt.Sprintf("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    window: {limit: 2, period: 10s, key: %s}\n    packages: [p]\n%s", key, extra))},
		"p.rego":     {Data: []byte("package p\ndeny contains \"no\" if input.context.labels.deny == \"yes\"\nwarn contains sprintf(\"window %d/%d\", [input.context.window.count, input.context.window.limit]) if true\n")},
	}
}

func TestWindowKeys(t *testing.T) {
	cases := map[string]struct {
		key      string
		second   node // after two changes by alice in edge
		admitted bool
	}{
		"by user: another user has room":            {key: "user", second: node{user: "bob"}, admitted: true},
		"by user: the same user elsewhere has none": {key: "user", second: node{namespace: "other"}, admitted: false},
		"by namespace: another namespace has room":  {key: "namespace", second: node{namespace: "other"}, admitted: true},
		"by namespace: another user in it has none": {key: "namespace", second: node{user: "bob"}, admitted: false},
		"by role: everyone shares one window":       {key: "role", second: node{user: "bob", namespace: "other"}, admitted: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, _ := stepped(t, windowedSet(tc.key, ""))
			for i := 0; i < 2; i++ {
				if d := e.Validate(context.Background(), node{}.input()); !d.Allowed {
					t.Fatal(d.Message)
				}
			}
			d := e.Validate(context.Background(), tc.second.input())
			if d.Allowed != tc.admitted {
				t.Fatalf("admitted=%v, want %v (%s)", d.Allowed, tc.admitted, d.Message)
			}
		})
	}
}

func TestPoliciesSeeTheWindow(t *testing.T) {
	e, _ := stepped(t, windowedSet("user", ""))
	for i, want := range []string{"window 0/2", "window 1/2"} {
		d := e.Validate(context.Background(), node{}.input())
		if len(d.Warnings) != 1 || d.Warnings[0] != want {
			t.Fatalf("change %d: policies should see the window before this change, warnings %q, want %q", i, d.Warnings, want)
		}
	}
}

func TestEnforcement(t *testing.T) {
	denied := node{labels: map[string]string{"deny": "yes"}}
	cases := map[string]struct {
		enforcement  string
		wantAllowed  bool
		wantWarning  string
		wantWouldDen bool
	}{
		"deny refuses": {enforcement: "deny"},
		"warn admits with the denial as a warning": {
			enforcement: "warn", wantAllowed: true, wantWouldDen: true,
			wantWarning: `not enforced (role "r" is in warn mode): denied by qn-admission (role "r"): no`,
		},
		"dryrun admits silently and records what it would deny": {enforcement: "dryrun", wantAllowed: true, wantWouldDen: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, _ := stepped(t, windowedSet("user", "    enforcement: "+tc.enforcement+"\n"))
			d := e.Validate(context.Background(), denied.input())
			if d.Allowed != tc.wantAllowed || (len(d.WouldDeny) > 0) != tc.wantWouldDen {
				t.Fatalf("allowed=%v wouldDeny=%q, want %v %v", d.Allowed, d.WouldDeny, tc.wantAllowed, tc.wantWouldDen)
			}
			if tc.wantWarning != "" && !containsString(d.Warnings, tc.wantWarning) {
				t.Fatalf("warnings %q lack %q", d.Warnings, tc.wantWarning)
			}
			if tc.enforcement == "dryrun" && len(d.Warnings) != 1 {
				t.Fatalf("dryrun adds no warnings of its own, got %q", d.Warnings)
			}
		})
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestOnError(t *testing.T) {
	broken := "package p\ndeny contains msg if { msg := sprintf(\"%d\", input.context.labels) }\n"
	for _, onError := range []string{"deny", "allow"} {
		t.Run(onError, func(t *testing.T) {
			fsys := windowedSet("user", "    onError: "+onError+"\n")
			fsys["p.rego"] = &fstest.MapFile{Data: []byte(broken)}
			e, _ := stepped(t, fsys)
			d := e.Validate(context.Background(), node{}.input())
			if !d.PolicyFailed {
				t.Errorf("onError %s: PolicyFailed unset, so strict health would not count this answer: %+v", onError, d)
			}
			switch onError {
			case "deny":
				if d.Allowed || d.Code != 500 || !strings.Contains(d.Message, `role "r": evaluate packages [p]`) {
					t.Fatalf("onError deny refuses with 500 naming the role: %+v", d)
				}
			case "allow":
				if !d.Allowed || len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "admitted without a policy decision (onError: allow)") {
					t.Fatalf("onError allow admits with a warning: %+v", d)
				}
			}
		})
	}
}

func TestExemptions(t *testing.T) {
	fsys := windowedSet("user", "")
	fsys["roles.yaml"].Data = append([]byte("exemptions: {users: [\"system:serviceaccount:kube-system:*\"], groups: [break-glass]}\n"), fsys["roles.yaml"].Data...)
	e, _ := stepped(t, fsys)
	for name, n := range map[string]node{
		"a user matched by prefix":    {user: "system:serviceaccount:kube-system:replicaset-controller", labels: map[string]string{"deny": "yes"}},
		"a member of an exempt group": {labels: map[string]string{"deny": "yes"}},
	} {
		t.Run(name, func(t *testing.T) {
			in := n.input()
			if name == "a member of an exempt group" {
				in.Facts.Groups = []string{"ops", "break-glass"}
			}
			d := e.Validate(context.Background(), in)
			if !d.Allowed || d.Exempt == "" {
				t.Fatalf("exempt requests are admitted unjudged: %+v", d)
			}
		})
	}
}

// The hot-path input builder must produce exactly the JSON form of the input.
func TestInputValueMatchesItsJSONForm(t *testing.T) {
	for name, n := range map[string]node{
		"a create":                {role: "realtime", labels: shanghai, annotations: fast},
		"a delete with oldObject": {op: "DELETE"},
		"a dry run":               {dryRun: true},
	} {
		t.Run(name, func(t *testing.T) {
			in := n.input()
			dry := true
			in.Request.DryRun = &dry
			in.Request.UserInfo.Username = "alice"
			in.Request.UserInfo.Groups = []string{"a", "b"}
			in.Request.UserInfo.Extra = map[string]authenticationv1.ExtraValue{"scopes": {"x"}}
			if in.Object != nil {
				// Floats whose digits strconv and encoding/json write differently.
				in.Object["scale"], in.Object["ratio"] = 1e7, 0.00001
				in.Request.Object.Raw, _ = json.Marshal(in.Object)
			}
			if in.OldObject != nil {
				in.Request.OldObject.Raw, _ = json.Marshal(in.OldObject)
			}
			c := in.Facts
			c.Groups = []string{"a"}
			c.Extra = map[string][]string{"scopes": {"x"}}
			c.Window = &WindowState{Key: "user", Count: 3, Limit: 120, PeriodSeconds: 60, Remaining: 117}
			fast, err := inputValue(in, c)
			if err != nil {
				t.Fatal(err)
			}
			js, _ := json.Marshal(policyInput{Request: in.Request, Facts: c})
			slow, err := ast.ValueFromReader(strings.NewReader(string(js)))
			if err != nil {
				t.Fatal(err)
			}
			if fast.Compare(slow) != 0 || fast.String() != slow.String() {
				t.Fatalf("fast input differs from its JSON form\nfast %v\njson %v", fast, slow)
			}
		})
	}
}
