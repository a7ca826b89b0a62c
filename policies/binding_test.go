package policies

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"
)

// guardedRoles is a role table as a cluster would write it: realtime
// nodes are created only by operators, deleted by admins and may not leave.
func guardedRoles(enforcement string) fstest.MapFS {
	return fstest.MapFS{
		"roles.yaml": {Data: []byte(`defaultRole: default
roles:
  realtime:
    operations: [CREATE, UPDATE]
    requesters: {groups: [qn:realtime-operators], serviceAccounts: ["qn-system:deployer", "ci:*"]}
    delete: {users: [ops-lead], groups: [system:masters]}
    enforcement: ` + enforcement + `
    packages: [p]
  default:
    operations: [CREATE, UPDATE, DELETE]
    moveTo: [realtime]
    packages: [p]
`)},
		"p.rego": {Data: []byte("package p\ndeny contains \"label deny=yes\" if input.context.labels.deny == \"yes\"\npatch contains {\"op\": \"add\", \"path\": \"/metadata/labels/judged\", \"value\": input.context.role} if input.request.object\n")},
	}
}

func TestRolesAreASecurityBoundary(t *testing.T) {
	operator := []string{"qn:realtime-operators", "system:authenticated"}
	cases := map[string]struct {
		table        fstest.MapFS // nil: the bundled table
		n            node
		wantAllowed  bool
		wantCode     int32
		wantRole     string
		wantMessage  string
		wantWarning  string
		wantExempt   string
		wantWouldDen string
	}{
		// Deletion never locks the cluster out.
		"the namespace controller deletes a realtime node": {
			n: node{op: "DELETE", role: "realtime", user: "system:serviceaccount:kube-system:namespace-controller"}, wantAllowed: true, wantCode: 200,
			wantExempt: "control plane: system:serviceaccount:kube-system:namespace-controller deletes for the cluster",
		},
		"the garbage collector deletes a batch node": {
			n: node{op: "DELETE", role: "batch", user: "system:serviceaccount:kube-system:generic-garbage-collector"}, wantAllowed: true, wantCode: 200,
			wantExempt: "control plane: system:serviceaccount:kube-system:generic-garbage-collector deletes for the cluster",
		},
		"kube-controller-manager without per-controller credentials deletes a realtime node": {
			n: node{op: "DELETE", role: "realtime", user: "system:kube-controller-manager"}, wantAllowed: true, wantCode: 200,
			wantExempt: "control plane: system:kube-controller-manager deletes for the cluster",
		},
		"a service account named like a controller in another namespace is not the control plane": {
			n: node{op: "DELETE", role: "realtime", user: "system:serviceaccount:team-a:namespace-controller"}, wantCode: 403, wantRole: "realtime",
			wantMessage: `may not delete a QuantumNode of role "realtime"`,
		},
		"the control plane is admitted only for DELETE": {
			n: node{role: "realtime", user: "system:serviceaccount:kube-system:namespace-controller", labels: shanghai}, wantCode: 403, wantRole: "realtime",
			wantMessage: `denied by qn-admission (role "realtime")`,
		},
		"a cluster admin deletes a realtime node": {
			n: node{op: "DELETE", role: "realtime", groups: []string{"system:masters", "system:authenticated"}}, wantAllowed: true, wantCode: 200, wantRole: "realtime",
		},
		"a cluster admin deletes a batch node": {
			n: node{op: "DELETE", role: "batch", groups: []string{"system:masters"}}, wantAllowed: true, wantCode: 200, wantRole: "batch",
		},
		"anyone who may write default nodes may delete them": {
			n: node{op: "DELETE"}, wantAllowed: true, wantCode: 200, wantRole: "default",
		},
		"a user named in the delete list deletes": {
			table: guardedRoles("deny"), n: node{op: "DELETE", role: "realtime", user: "ops-lead"}, wantAllowed: true, wantCode: 200,
		},
		"a node stored under a role no longer declared is deleted under the default role, with a warning": {
			n: node{op: "DELETE", role: "retired"}, wantAllowed: true, wantCode: 200, wantRole: "default",
			wantWarning: `the stored QuantumNode names role "retired", which the role table no longer declares; its deletion is judged by the default role "default"`,
		},

		// The stored object's role judges UPDATE.
		"dropping qn-role from a batch node is refused and names the stored role": {
			n: node{op: "UPDATE", oldRole: "batch", labels: map[string]string{"priority": "low"}}, wantCode: 403, wantRole: "batch",
			wantMessage: `the stored QuantumNode is under role "batch", which may not update it (it may CREATE); removing or changing the qn-role annotation does not change the role that judges an update`,
		},
		"changing a batch node to realtime is refused by batch": {
			n: node{op: "UPDATE", role: "realtime", oldRole: "batch", labels: shanghai, annotations: fast}, wantCode: 403, wantRole: "batch",
			wantMessage: `under role "batch", which may not update it`,
		},
		"dropping qn-role from a realtime node is a move realtime does not allow": {
			n: node{op: "UPDATE", oldRole: "realtime", labels: shanghai, annotations: fast}, wantCode: 403, wantRole: "realtime",
			wantMessage: `the stored QuantumNode is under role "realtime", which does not let it move to role "default" (roles.realtime.moveTo lists none)`,
		},
		"a default node promoted to realtime is judged by realtime's policies": {
			n: node{op: "UPDATE", role: "realtime", oldRole: "-"}, wantCode: 403, wantRole: "realtime",
			wantMessage: `denied by qn-admission (role "realtime")`,
		},
		"a default node promoted to realtime that meets realtime's rules is admitted under realtime": {
			n: node{op: "UPDATE", role: "realtime", oldRole: "-", labels: shanghai, annotations: fast}, wantAllowed: true, wantCode: 200, wantRole: "realtime",
		},
		"promotion into a guarded role needs its requesters": {
			table: guardedRoles("deny"), n: node{op: "UPDATE", role: "realtime", oldRole: "-"}, wantCode: 403, wantRole: "realtime",
			wantMessage: `user "alice" (groups system:authenticated) may not move QuantumNodes under role "realtime": roles.realtime.requesters admits only groups qn:realtime-operators; service accounts qn-system:deployer, ci:*`,
		},
		"an operator promotes a default node into a guarded role": {
			table: guardedRoles("deny"), n: node{op: "UPDATE", role: "realtime", oldRole: "-", groups: operator}, wantAllowed: true, wantCode: 200, wantRole: "realtime",
		},
		"a node stored under a role no longer declared is judged as entering its new role": {
			n: node{op: "UPDATE", oldRole: "retired"}, wantAllowed: true, wantCode: 200, wantRole: "default",
			wantWarning: `the stored QuantumNode names role "retired", which the role table no longer declares; it is judged as entering role "default"`,
		},
		"an update within a guarded role by a non-requester is judged by its policies, with a warning": {
			table: guardedRoles("deny"), n: node{op: "UPDATE", role: "realtime"}, wantAllowed: true, wantCode: 200, wantRole: "realtime",
			wantWarning: `user "alice" (groups system:authenticated) is not among roles.realtime.requesters`,
		},

		// Who may pick a role.
		"a create by a requester the role does not admit names the role and what they lack": {
			table: guardedRoles("deny"), n: node{role: "realtime", user: "bob", groups: []string{"dev"}}, wantCode: 403, wantRole: "realtime",
			wantMessage: `user "bob" (groups dev) may not create QuantumNodes under role "realtime": roles.realtime.requesters admits only groups qn:realtime-operators; service accounts qn-system:deployer, ci:*`,
		},
		"a member group creates under a guarded role": {
			table: guardedRoles("deny"), n: node{role: "realtime", groups: operator}, wantAllowed: true, wantCode: 200, wantRole: "realtime",
		},
		"a listed service account creates under a guarded role": {
			table: guardedRoles("deny"), n: node{role: "realtime", user: "system:serviceaccount:qn-system:deployer", groups: []string{}}, wantAllowed: true, wantCode: 200,
		},
		"a service account matched by namespace:* creates under a guarded role": {
			table: guardedRoles("deny"), n: node{role: "realtime", user: "system:serviceaccount:ci:runner", groups: []string{}}, wantAllowed: true, wantCode: 200,
		},
		"a service account of the same name in another namespace is not listed": {
			table: guardedRoles("deny"), n: node{role: "realtime", user: "system:serviceaccount:team-a:deployer", groups: []string{}}, wantCode: 403,
			wantMessage: `may not create QuantumNodes under role "realtime"`,
		},
		"in warn mode a refused create is admitted with the refusal as a warning": {
			table: guardedRoles("warn"), n: node{role: "realtime", user: "bob", groups: []string{"dev"}}, wantAllowed: true, wantCode: 200,
			wantWarning:  `not enforced (role "realtime" is in warn mode): user "bob" (groups dev) may not create`,
			wantWouldDen: `may not create QuantumNodes under role "realtime"`,
		},

		// Malformed requests get a clear answer.
		"an UPDATE without oldObject is refused as malformed": {
			n: node{op: "UPDATE", noOldObject: true}, wantCode: 400,
			wantMessage: "request.oldObject is missing: a UPDATE must carry the stored object, whose qn-role annotation decides the role that judges it",
		},
		"a DELETE without oldObject is refused as malformed": {
			n: node{op: "DELETE", noOldObject: true}, wantCode: 400,
			wantMessage: "request.oldObject is missing: a DELETE must carry the stored object",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, _ := stepped(t, tc.table)
			d := e.Validate(context.Background(), tc.n.input())
			if d.Allowed != tc.wantAllowed || d.Code != tc.wantCode || !strings.Contains(d.Message, tc.wantMessage) {
				t.Fatalf("got allowed=%v code=%d message %q\nwant allowed=%v code=%d message containing %q", d.Allowed, d.Code, d.Message, tc.wantAllowed, tc.wantCode, tc.wantMessage)
			}
			if tc.wantRole != "" && d.Role != tc.wantRole {
				t.Errorf("decided under role %q, want %q", d.Role, tc.wantRole)
			}
			if d.Exempt != tc.wantExempt {
				t.Errorf("exempt %q, want %q", d.Exempt, tc.wantExempt)
			}
			if tc.wantWarning != "" && !strings.Contains(strings.Join(d.Warnings, "\n"), tc.wantWarning) {
				t.Errorf("warnings %q, want one containing %q", d.Warnings, tc.wantWarning)
			}
			if tc.wantWouldDen != "" && !strings.Contains(strings.Join(d.WouldDeny, "\n"), tc.wantWouldDen) {
				t.Errorf("wouldDeny %q, want one containing %q", d.WouldDeny, tc.wantWouldDen)
			}
		})
	}
}

func TestAMoveCountsAgainstTheWindowOfTheRoleItEnters(t *testing.T) {
	e, _ := stepped(t, nil)
	d := e.Validate(context.Background(), node{op: "UPDATE", role: "realtime", oldRole: "-", labels: shanghai, annotations: fast}.input())
	if !d.Allowed || d.Window == nil || d.Window.Limit != 120 {
		t.Fatalf("a promotion into realtime must count against realtime's 120/60s window: %+v", d)
	}
}

func TestTheMutatingPathDoesNotPatchUnderARoleTheRequestCannotEnter(t *testing.T) {
	ctx := context.Background()
	e, _ := stepped(t, guardedRoles("deny"))
	refused := e.Mutate(ctx, node{op: "UPDATE", role: "realtime", oldRole: "-"}.input())
	if !refused.Allowed || refused.PatchOps != 0 || refused.Role != "realtime" {
		t.Errorf("a refused move passes the mutating webhook unpatched: %+v", refused)
	}
	admitted := e.Mutate(ctx, node{op: "UPDATE", role: "realtime", oldRole: "-", groups: []string{"qn:realtime-operators"}}.input())
	if admitted.PatchOps != 1 || !strings.Contains(string(admitted.Patch), `"realtime"`) {
		t.Errorf("an admitted move is patched under the role it enters: %+v %s", admitted, admitted.Patch)
	}
}

func TestRoleTableErrorsForBindingRules(t *testing.T) {
	base := "defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n%s  s:\n    operations: [CREATE]\n    packages: [p]\n"
	cases := map[string]struct{ extra, want string }{
		"requesters that list nobody": {
			"    requesters: {}\n", `roles.yaml:6: roles.r.requesters: lists nobody; name users, groups or serviceAccounts (remove requesters to leave it unrestricted)`,
		},
		"a service account's user name among groups": {
			"    delete: {groups: [\"system:serviceaccount:ci:bot\"]}\n", `roles.yaml:6: roles.r.delete.groups: "system:serviceaccount:ci:bot" is a service account's user name, not a group; list it under serviceAccounts as namespace:name`,
		},
		"a service account without its namespace": {
			"    requesters: {serviceAccounts: [deployer]}\n", `roles.yaml:6: roles.r.requesters.serviceAccounts: "deployer" is not namespace:name (the name may be *, e.g. qn-system:deployer or ci:*)`,
		},
		"an empty group name": {
			"    requesters: {groups: [\"\"]}\n", `roles.yaml:6: roles.r.requesters.groups: "" is not a name (no spaces, not empty)`,
		},
		"a move to a role that does not exist": {
			"    moveTo: [fast]\n", `roles.yaml:6: roles.r.moveTo: "fast" is not one of the declared roles (r, s)`,
		},
		"a move to itself": {
			"    moveTo: [r]\n", `roles.yaml:6: roles.r.moveTo: a role cannot move to itself; list other roles`,
		},
		"a typo inside requesters": {
			"    requesters: {group: [a]}\n", `roles.yaml:6: roles.r.requesters.group: unknown field (known here: users, groups, serviceAccounts)`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			files := fstest.MapFS{
				"roles.yaml": {Data: []byte(strings.Replace(base, "%s", tc.extra, 1))},
				"p.rego":     {Data: []byte("package p\ndeny contains \"no\" if false\n")},
			}
			_, err := Load(context.Background(), files, LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}
