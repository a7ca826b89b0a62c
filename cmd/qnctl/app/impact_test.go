package app

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

var impactT0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// auditEvent is one ResponseComplete line of a kube-apiserver audit log
// for a QuantumNode write, as the apiserver writes it.
type auditEvent struct {
	verb, namespace, name, user string
	at                          time.Duration
	code                        int32
	message                     string
	request, response           string
	level                       auditv1.Level
	impersonate                 string
	subresource, resource       string
	annotations                 map[string]string
	uri                         string
}

func (e auditEvent) line(t testing.TB, i int) string {
	t.Helper()
	level := e.level
	if level == "" {
		level = auditv1.LevelRequestResponse
	}
	resource := e.resource
	if resource == "" {
		resource = "quantumnodes"
	}
	ev := auditv1.Event{
		TypeMeta: metav1.TypeMeta{APIVersion: "audit.k8s.io/v1", Kind: "Event"},
		Level:    level, AuditID: types.UID(fmt.Sprint("audit-", i)), Stage: auditv1.StageResponseComplete,
		RequestURI: e.uri, Verb: e.verb,
		User:                     authenticationv1.UserInfo{Username: e.user, Groups: []string{"system:authenticated"}},
		ObjectRef:                &auditv1.ObjectReference{Resource: resource, Namespace: e.namespace, Name: e.name, APIGroup: "qn.dev", APIVersion: "v1alpha1", Subresource: e.subresource},
		ResponseStatus:           &metav1.Status{Code: e.code, Message: e.message},
		RequestReceivedTimestamp: metav1.NewMicroTime(impactT0.Add(e.at)),
		StageTimestamp:           metav1.NewMicroTime(impactT0.Add(e.at + time.Millisecond)),
		Annotations:              e.annotations,
	}
	if e.impersonate != "" {
		ev.ImpersonatedUser = &authenticationv1.UserInfo{Username: e.impersonate, Groups: []string{"system:authenticated"}}
	}
	if e.request != "" && level != auditv1.LevelMetadata {
		ev.RequestObject = &runtime.Unknown{Raw: []byte(e.request)}
	}
	if e.response != "" && level == auditv1.LevelRequestResponse {
		ev.ResponseObject = &runtime.Unknown{Raw: []byte(e.response)}
	}
	js, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

// writeAuditLog writes events (and extra raw lines first) as an audit log.
func writeAuditLog(t *testing.T, events []auditEvent, extra ...string) string {
	t.Helper()
	lines := append([]string(nil), extra...)
	for i, e := range events {
		lines = append(lines, e.line(t, i))
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// demoNode is a QuantumNode of testdata/policies' standard role.
func demoNode(name, arch string, port int) string {
	return fmt.Sprintf(`{"apiVersion":"qn.dev/v1alpha1","kind":"QuantumNode","metadata":{"name":%q,"namespace":"demo"},"spec":{"hardware":{"arch":%q},"services":[{"name":"api","port":%d}]}}`, name, arch, port)
}

const deniedByWebhook = `admission webhook "validate.qn-admission.qn.dev" denied the request: denied by qn-admission`

// impactJSON is what the tests read of -o json.
type impactJSON struct {
	Inputs []inputReport   `json:"inputs"`
	Totals map[string]int  `json:"totals"`
	Groups []impactGroupJS `json:"groups"`
}

type impactGroupJS struct {
	Role     string   `json:"role"`
	Packages []string `json:"packages"`
	Flips    []flip   `json:"flips"`
}

func runImpactJSON(t *testing.T, wantCode int, args ...string) impactJSON {
	t.Helper()
	code, out, stderr := run(t, "", append([]string{"impact", "-o", "json"}, args...)...)
	if code != wantCode {
		t.Fatalf("want exit %d, got %d: %s\n%s", wantCode, code, stderr, out)
	}
	var r impactJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	return r
}

// flipLines are the flips as "change op ns/name by user [packages] code".
func (r impactJSON) flipLines() []string {
	var out []string
	for _, g := range r.Groups {
		for _, f := range g.Flips {
			out = append(out, fmt.Sprintf("%s %s %s/%s by %s [%s] %d->%d", strings.Join(f.Changes, "+"), f.Operation, f.Namespace, f.Name, f.User,
				strings.Join(g.Packages, ","), f.Base.Code, f.Proposed.Code))
		}
	}
	return out
}

func TestImpactReplaysRateWindowsAtTheRecordedTimes(t *testing.T) {
	// The proposal gives the standard role a window of 2 changes per 60s
	// per user; the base set has none.
	proposed := copyDir(t, testPolicies, map[string]string{"roles.yaml": strings.Replace(mustRead(t, testPolicies+"/roles.yaml"),
		"    packages: [demo.nodes, demo.label]\n", "    packages: [demo.nodes, demo.label]\n    window: {limit: 2, period: 60s}\n", 1)})
	ok := func(name string) string { return demoNode(name, "arm64", 8080) }
	log := writeAuditLog(t, []auditEvent{
		{verb: "create", namespace: "demo", user: "alice", at: 0, code: 201, request: ok("n1"), response: ok("n1")},
		{verb: "create", namespace: "demo", user: "alice", at: 10 * time.Second, code: 201, request: ok("n2"), response: ok("n2")},
		// bob's window is his own.
		{verb: "create", namespace: "demo", user: "bob", at: 15 * time.Second, code: 201, request: ok("b1"), response: ok("b1")},
		// The third change inside a minute: 429 under the proposal.
		{verb: "create", namespace: "demo", user: "alice", at: 20 * time.Second, code: 201, request: ok("n3"), response: ok("n3")},
		// 70s after the first, one slot has freed: admitted again.
		{verb: "create", namespace: "demo", user: "alice", at: 70 * time.Second, code: 201, request: ok("n4"), response: ok("n4")},
		// A change made through impersonation counts for whom it was made.
		{verb: "create", namespace: "demo", user: "admin", impersonate: "bob", at: 71 * time.Second, code: 201, request: ok("b2"), response: ok("b2")},
		{verb: "create", namespace: "demo", user: "admin", impersonate: "bob", at: 72 * time.Second, code: 201, request: ok("b3"), response: ok("b3")},
	})
	r := runImpactJSON(t, exitFailed, "--base", testPolicies, "--proposed", proposed, "--audit-log", log)
	want := []string{
		"newly denied CREATE demo/n3 by alice [window] 200->429",
		"newly denied CREATE demo/b3 by bob [window] 200->429",
	}
	if got := r.flipLines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("flips:\n got  %q\n want %q", got, want)
	}
	if len(r.Inputs) != 1 || r.Inputs[0].Judged != 7 || r.Inputs[0].RecordedDiffers != 0 {
		t.Errorf("inputs: %+v", r.Inputs)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestImpactSaysWhatItCouldNotReplay(t *testing.T) {
	ok := demoNode("n1", "arm64", 8080)
	log := writeAuditLog(t, []auditEvent{
		{verb: "create", namespace: "demo", user: "alice", code: 201, request: ok, level: auditv1.LevelMetadata},
		{verb: "update", namespace: "demo", name: "old", user: "alice", code: 200, request: demoNode("old", "arm64", 8080)},
		{verb: "deletecollection", namespace: "demo", user: "alice", code: 200},
		{verb: "create", namespace: "demo", user: "alice", code: 422, message: "QuantumNode is invalid", request: demoNode("bad", "arm64", 70000)},
		{verb: "create", namespace: "demo", user: "carol", code: 403, message: "forbidden", request: ok, annotations: map[string]string{"authorization.k8s.io/decision": "forbid"}},
		{verb: "create", namespace: "demo", user: "alice", code: 201, request: `{"apiVersion":"v1","kind":"ConfigMap"}`, resource: "configmaps"},
		// Recorded as admitted, but the base set refuses it: the cluster
		// ran other policies.
		{verb: "create", namespace: "demo", user: "alice", code: 201, request: demoNode("n2", "s390x", 8080), response: demoNode("n2", "s390x", 8080)},
		// Recorded as refused by the webhook, and refused by the base set.
		{verb: "create", namespace: "demo", user: "alice", code: 403, message: deniedByWebhook, request: demoNode("n3", "s390x", 8080)},
		// A dry run, a status write and a merge patch of a node the log saw created.
		{verb: "create", namespace: "demo", user: "alice", code: 201, request: demoNode("n4", "arm64", 80), uri: "/apis/qn.dev/v1alpha1/namespaces/demo/quantumnodes?dryRun=All"},
		{verb: "create", namespace: "demo", user: "alice", code: 201, request: demoNode("n5", "arm64", 8080)},
		{verb: "patch", namespace: "demo", name: "n5", user: "alice", code: 200, subresource: "status", request: `{"status":{"phase":"Ready"}}`},
		{verb: "patch", namespace: "demo", name: "n5", user: "alice", code: 200, request: `{"spec":{"services":[{"name":"web","port":80}]}}`},
	}, "not json", `{"kind":"Event","apiVersion":"v1"}`)
	r := runImpactJSON(t, exitOK, "--base", testPolicies, "--proposed", testPolicies, "--audit-log", log)
	in := r.Inputs[0]
	wantSkipped := map[string]int{
		skipMetadataLevel: 1, skipNoOldObject: 1, skipCollection: 1, skipRefusedBefore: 2, skipUndecodable: 2,
	}
	if in.Judged != 5 || in.RecordedDiffers != 1 || fmt.Sprint(in.Skipped) != fmt.Sprint(wantSkipped) {
		t.Errorf("want 5 judged, 1 recorded answer differing and skipped %v; got %+v", wantSkipped, in)
	}
	if len(r.Groups) != 0 {
		t.Errorf("the same set on both sides flips nothing, got %v", r.flipLines())
	}
}

func TestImpactOfStoredNodesAndReviews(t *testing.T) {
	// The proposal refuses privileged ports (a warning until now) and
	// admits riscv.
	proposed := copyDir(t, testPolicies, map[string]string{
		"nodes.rego": strings.NewReplacer(`{"amd64", "arm64"}`, `{"amd64", "arm64", "riscv"}`).Replace(mustRead(t, testPolicies+"/nodes.rego")) +
			"\ndeny contains sprintf(\"service %s uses privileged port %d\", [svc.name, svc.port]) if {\n\tjudged\n\tsome svc in object.get(spec, \"services\", [])\n\tsvc.port < 1024\n}\n",
	})
	reviews := t.TempDir()
	review := func(name, obj string) {
		rev := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-%s","kind":{"group":"qn.dev","version":"v1alpha1","kind":"QuantumNode"},"resource":{"group":"qn.dev","version":"v1alpha1","resource":"quantumnodes"},"namespace":"demo","name":%q,"operation":"CREATE","userInfo":{"username":"dave"},"object":%s}}`, name, name, obj)
		if err := os.WriteFile(filepath.Join(reviews, name+".json"), []byte(rev), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	review("r1", demoNode("r1", "arm64", 80))
	review("r2", demoNode("r2", "arm64", 8080))
	if err := os.WriteFile(filepath.Join(reviews, "notes.yaml"), []byte("kind: ConfigMap\napiVersion: v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runImpactJSON(t, exitFailed, "--base", testPolicies, "--proposed", proposed, "--reviews", reviews, "--time", testTime, "testdata/audit/snapshot.yaml")
	// One group (role standard, package demo.nodes), in input order:
	// the snapshot, then the reviews.
	want := []string{
		"reasons changed stored demo/n2 by  [demo.nodes] 403->403",
		"newly denied CREATE demo/r1 by dave [demo.nodes] 200->403",
	}
	if got := r.flipLines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("flips:\n got  %q\n want %q", got, want)
	}
	code, md, _ := run(t, "", "impact", "-o", "markdown", "--allow-new-denials", "--base", testPolicies, "--proposed", proposed, "--reviews", reviews, "--time", testTime)
	if code != exitOK || !strings.Contains(md, "**1 newly denied**") || !strings.Contains(md, "| newly denied | CREATE demo/r1 by \"dave\"") {
		t.Errorf("markdown: exit %d\n%s", code, md)
	}
}

func TestImpactRefusesToPassOnNothing(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, []byte("apiVersion: v1\nkind: List\nitems: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args   []string
		code   int
		stderr string
	}{
		"no inputs": {args: []string{"--base", testPolicies, "--proposed", testPolicies}, code: exitBadInput,
			stderr: "nothing to judge the change on: give snapshots, --audit-log, --reviews or --cluster"},
		"no --base": {args: []string{"--proposed", testPolicies, empty}, code: exitBadInput, stderr: "give both --base"},
		"inputs that hold nothing": {args: []string{"--base", testPolicies, "--proposed", testPolicies, empty}, code: exitBadInput,
			stderr: "nothing was judged: the inputs hold no QuantumNode write and no stored QuantumNode (snapshot " + empty + ": 0 judged); --allow-empty accepts that"},
		"inputs that hold nothing, allowed": {args: []string{"--base", testPolicies, "--proposed", testPolicies, empty, "--allow-empty"}, code: exitOK},
		"a --base that is neither a directory nor a ref": {args: []string{"--base", "no-such-ref-anywhere", "--proposed", testPolicies, empty}, code: exitBadInput,
			stderr: "--base no-such-ref-anywhere is neither a directory nor a commit of the Git repository of " + testPolicies},
		"a --proposed that is not a directory": {args: []string{"--base", testPolicies, "--proposed", empty, empty}, code: exitBadInput,
			stderr: "--proposed " + empty + " is not a policy directory"},
		"an unknown output": {args: []string{"--base", testPolicies, "--proposed", testPolicies, empty, "-o", "html"}, code: exitBadInput,
			stderr: `--output "html" is not one of text, json, markdown`},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := run(t, "", append([]string{"impact"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("want exit %d and %q, got %d: %s", tc.code, tc.stderr, code, stderr)
			}
		})
	}
}

func TestImpactReadsTheBaseFromGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	repo := t.TempDir()
	dir := filepath.Join(repo, "team", "policies")
	if err := os.CopyFS(dir, os.DirFS(testPolicies)); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "in force")
	git("tag", "v1")
	// The working tree refuses arm64 from now on.
	nodes := filepath.Join(dir, "nodes.rego")
	if err := os.WriteFile(nodes, []byte(mustRead(t, nodes)+"\ndeny contains \"arm64 is retired\" if {\n\tjudged\n\tspec.hardware.arch == \"arm64\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runImpactJSON(t, exitFailed, "--base", "v1", "--proposed", dir, "testdata/audit/compliant.yaml")
	if got := r.flipLines(); len(got) != 1 || !strings.HasPrefix(got[0], "newly denied stored demo/") {
		t.Errorf("want the stored arm64 node newly denied, got %q", got)
	}
	code, out, _ := run(t, "", "impact", "--base", "v1", "--proposed", dir, "testdata/audit/compliant.yaml", "--allow-new-denials")
	if code != exitOK || !strings.Contains(out, "against base v1 (commit ") {
		t.Errorf("want the base named by its ref and commit, got %d:\n%s", code, out)
	}
}

// TestImpactOfAPatternOnStoredNodes: a proposal that adds a pattern policy
// reports the stored nodes it would refuse their next update, as it does
// for Rego: patterns are not invisible to impact on snapshots.
func TestImpactOfAPatternOnStoredNodes(t *testing.T) {
	roles := strings.Replace(mustRead(t, testPolicies+"/roles.yaml"),
		"    packages: [demo.nodes, demo.label]\n", "    packages: [demo.nodes, demo.label]\n    patterns: [amd64-only]\n", 1)
	proposed := copyDir(t, testPolicies, map[string]string{
		"roles.yaml":              roles,
		"amd64-only.pattern.yaml": "kind: PatternPolicy\nvalidate:\n  message: standard nodes run on amd64\n  pattern: {spec: {hardware: {arch: amd64}}}\n",
	})
	r := runImpactJSON(t, exitFailed, "--base", testPolicies, "--proposed", proposed, "--time", testTime, "testdata/audit/snapshot.yaml")
	// n1 (arm64, standard) was compliant and is now refused; n2 (riscv)
	// was refused already and gains a reason; n3 and n4 are other roles.
	want := []string{
		"newly denied stored demo/n1 by  [amd64-only] 0->403",
		"reasons changed stored demo/n2 by  [amd64-only] 403->403",
	}
	if got := r.flipLines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("flips:\n got  %q\n want %q", got, want)
	}
}
