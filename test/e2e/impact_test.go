package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

var (
	qnctlOnce sync.Once
	qnctlBin  string
	qnctlErr  error
)

// qnctl is the built qnctl binary.
func qnctl(t *testing.T) string {
	t.Helper()
	qnctlOnce.Do(func() { qnctlBin, qnctlErr = harness.Build(context.Background(), suiteDir, "./cmd/qnctl") })
	if qnctlErr != nil {
		t.Fatal(qnctlErr)
	}
	return qnctlBin
}

// impactNamespace holds the scripted writes; qnctl impact -n reads only it
// from the suite's audit log.
const impactNamespace = "impact"

// TestImpactOfAPolicyChangeOnARealAuditLog writes QuantumNodes as two
// users through the suite's qn-webhook (the bundled policies), so the
// kube-apiserver's own audit log records a day of real writes: creates,
// full updates, merge and JSON patches, a dry run, a delete, refusals by
// the webhook and by the schema (which the webhook never sees). A proposed change tightens one rule (a
// new package refuses port 22) and loosens another (the realtime latency
// budget goes from 50 to 100 ms). qnctl impact, with --base a Git ref of
// the repository the proposal lives in, must list exactly the answers the
// change flips, and find the base set's answers equal to the recorded ones.
func TestImpactOfAPolicyChangeOnARealAuditLog(t *testing.T) {
	registered(t)
	ctx := context.Background()
	if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: impactNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := impersonating(t, "impact-alice", "qn:ops").Resource(harness.QuantumNodes).Namespace(impactNamespace)
	bob := impersonating(t, "impact-bob", "qn:developers").Resource(harness.QuantumNodes).Namespace(impactNamespace)

	node := func(name string, role string, labels, annotations map[string]string, services ...service) *unstructured.Unstructured {
		obj := qn(name, "arm64", services...)
		obj.SetNamespace(impactNamespace)
		if role != "" {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations["qn-role"] = role
		}
		obj.SetLabels(labels)
		obj.SetAnnotations(annotations)
		return obj
	}
	shanghai := map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"}
	budget := func(ms string) map[string]string { return map[string]string{"qn.dev/latency-budget-ms": ms} }
	type step struct {
		what string
		do   func() error
		// refused says the write is refused under the bundled policies
		// (or, with schema, by the CRD's schema).
		refused, schema bool
	}
	create := func(c dynamic.ResourceInterface, obj *unstructured.Unstructured, dryRun bool) func() error {
		return func() error {
			opts := metav1.CreateOptions{}
			if dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			_, err := c.Create(ctx, obj, opts)
			return err
		}
	}
	patch := func(c dynamic.ResourceInterface, name string, pt types.PatchType, body string) func() error {
		return func() error {
			_, err := c.Patch(ctx, name, pt, []byte(body), metav1.PatchOptions{})
			return err
		}
	}
	script := []step{
		{what: "alice creates a1", do: create(alice, node("a1", "", nil, nil, svc("mqtt", 8883)), false)},
		{what: "alice creates a2 with SSH", do: create(alice, node("a2", "", nil, nil, svc("ssh", 22), svc("mqtt", 8883)), false)},
		{what: "bob creates realtime b1 with an 80 ms budget", do: create(bob, node("b1", "realtime", shanghai, budget("80"), svc("rt", 9000)), false), refused: true},
		{what: "bob creates realtime b2 with a 20 ms budget", do: create(bob, node("b2", "realtime", shanghai, budget("20"), svc("rt", 9000)), false)},
		{what: "bob merge-patches b2 to an 80 ms budget", do: patch(bob, "b2", types.MergePatchType, `{"metadata":{"annotations":{"qn.dev/latency-budget-ms":"80"}}}`), refused: true},
		{what: "alice JSON-patches SSH into a1", do: patch(alice, "a1", types.JSONPatchType, `[{"op":"add","path":"/spec/services/-","value":{"name":"ssh","port":22}}]`)},
		{what: "alice updates a1's MQTT port", do: func() error {
			got, err := alice.Get(ctx, "a1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			services, _, _ := unstructured.NestedSlice(got.Object, "spec", "services")
			services[0].(map[string]any)["port"] = int64(8884)
			if err := unstructured.SetNestedSlice(got.Object, services, "spec", "services"); err != nil {
				return err
			}
			_, err = alice.Update(ctx, got, metav1.UpdateOptions{})
			return err
		}},
		{what: "bob creates realtime b3 in eu-west-1 with an 80 ms budget", do: create(bob, node("b3", "realtime", map[string]string{"topology.kubernetes.io/zone": "eu-west-1"}, budget("80"), svc("rt", 9000)), false), refused: true},
		{what: "alice dry-runs a3 with SSH", do: create(alice, node("a3", "", nil, nil, svc("ssh", 22)), true)},
		{what: "alice creates a4 with a port the schema refuses", do: create(alice, node("a4", "", nil, nil, svc("big", 70000)), false), refused: true, schema: true},
		{what: "alice deletes a2", do: func() error { return alice.Delete(ctx, "a2", metav1.DeleteOptions{}) }},
	}
	for _, s := range script {
		err := s.do()
		if (err != nil) != s.refused {
			t.Fatalf("%s: want refused=%t, got %v", s.what, s.refused, err)
		}
		if s.refused && !s.schema && !strings.Contains(err.Error(), "denied the request") {
			t.Fatalf("%s: want a refusal by the webhook, got %v", s.what, err)
		}
	}
	waitForAuditEvent(t, "delete", impactNamespace, "a2")

	repo := proposeChange(t)
	run := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(qnctl(t), append([]string{"impact", "--base", "HEAD", "--proposed", filepath.Join(repo, "policies"),
			"--audit-log", cluster.AuditLog, "-n", impactNamespace}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}
	code, out, stderr := run("-o", "json")
	if code != 1 || !strings.Contains(stderr, "4 would newly be denied") {
		t.Fatalf("want exit 1 and 4 newly denied, got %d: %s\n%s", code, stderr, out)
	}
	var report struct {
		Inputs []struct {
			Kind            string         `json:"kind"`
			Judged          int            `json:"judged"`
			Skipped         map[string]int `json:"skipped"`
			RecordedDiffers int            `json:"recordedDiffers"`
		} `json:"inputs"`
		Totals map[string]int `json:"totals"`
		Groups []struct {
			Role     string   `json:"role"`
			Packages []string `json:"packages"`
			Flips    []struct {
				Changes   []string `json:"changes"`
				User      string   `json:"user"`
				Operation string   `json:"operation"`
				Namespace string   `json:"namespace"`
				Name      string   `json:"name"`
			} `json:"flips"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	in := report.Inputs
	if len(in) != 1 || in[0].Judged != 10 || in[0].RecordedDiffers != 0 || len(in[0].Skipped) != 1 || in[0].Skipped["refused before the validating webhooks ran"] != 1 {
		t.Errorf("want the audit log's 10 writes in %s judged, the schema's refusal skipped and every recorded answer reproduced by the base set; got %+v", impactNamespace, in)
	}
	var got []string
	for _, g := range report.Groups {
		for _, f := range g.Flips {
			got = append(got, fmt.Sprintf("%s/%s: %s %s %s/%s by %s", g.Role, strings.Join(g.Packages, "+"), strings.Join(f.Changes, "+"), f.Operation, f.Namespace, f.Name, f.User))
		}
	}
	want := []string{
		"default/qn.ssh: newly denied CREATE impact/a2 by impact-alice",
		"default/qn.ssh: newly denied UPDATE impact/a1 by impact-alice",              // the JSON patch
		"default/qn.ssh: newly denied UPDATE impact/a1 by impact-alice",              // the update: a1 holds port 22 since the patch
		"default/qn.ssh: newly denied CREATE impact/a3 by impact-alice",              // the dry run
		"realtime/qn.roles.realtime: reasons changed CREATE impact/b3 by impact-bob", // the zone still refuses it
		"realtime/qn.roles.realtime: newly allowed CREATE impact/b1 by impact-bob",
		"realtime/qn.roles.realtime: newly allowed UPDATE impact/b2 by impact-bob",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("flips:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
	if report.Totals["newly denied"] != 4 || report.Totals["newly allowed"] != 2 || report.Totals["reasons changed"] != 1 || report.Totals["warnings changed"] != 0 {
		t.Errorf("totals: %v", report.Totals)
	}

	code, md, _ := run("-o", "markdown", "--allow-new-denials")
	if code != 0 || !strings.Contains(md, "**4 newly denied**") || !strings.Contains(md, "#### role `default`, package `qn.ssh`: 4 newly denied") {
		t.Errorf("markdown with --allow-new-denials: want exit 0 and the totals, got %d:\n%s", code, md)
	}
}

// proposeChange makes a Git repository whose HEAD holds the suite's
// policies and whose working tree holds the proposed change: a package
// refusing port 22 in the default role, and a realtime latency budget of
// 100 ms instead of 50 (with the Rego test that pins it).
func proposeChange(t *testing.T) string {
	t.Helper()
	return proposeChangeOf(t, policyDir)
}

// proposeChangeOf is proposeChange made to the policy directory from.
func proposeChangeOf(t *testing.T, from string) string {
	t.Helper()
	repo := t.TempDir()
	dir := filepath.Join(repo, "policies")
	if err := os.CopyFS(dir, os.DirFS(from)); err != nil {
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
	git("commit", "-q", "-m", "policies in force")
	edit := func(file string, pairs ...string) {
		path := filepath.Join(dir, file)
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(pairs); i += 2 {
			if !strings.Contains(string(src), pairs[i]) {
				t.Fatalf("%s no longer holds %q: update this test's proposed change", file, pairs[i])
			}
		}
		if err := os.WriteFile(path, []byte(strings.NewReplacer(pairs...).Replace(string(src))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("roles.yaml",
		"packages: [qn.quantumnode, qn.window, qn.mutate.managedby]", "packages: [qn.quantumnode, qn.ssh, qn.window, qn.mutate.managedby]",
		"maxLatencyBudgetMs: 50", "maxLatencyBudgetMs: 100")
	edit("roles_test.rego",
		`"qn.dev/latency-budget-ms": "50"})`, `"qn.dev/latency-budget-ms": "100"})`,
		"latency budget 50 ms", "latency budget 100 ms", "maximum of 50 ms", "maximum of 100 ms",
		`"49.5"`, `"99.5"`, "below 50)", "below 100)")
	ssh := `package qn.ssh

import data.qn.quantumnode

# Edge firewalls close port 22.
deny contains msg if {
	quantumnode.judged
	some i, svc in quantumnode.services
	svc.port == 22
	msg := sprintf("spec.services[%d] (%v) uses port 22: SSH is closed on edge nodes", [i, svc.name])
}
`
	if err := os.WriteFile(filepath.Join(dir, "ssh.rego"), []byte(ssh), 0o644); err != nil {
		t.Fatal(err)
	}
	return repo
}

// waitForAuditEvent waits until the audit log holds the completed verb
// on namespace/name.
func waitForAuditEvent(t *testing.T, verb, namespace, name string) {
	t.Helper()
	harness.WaitFor(t, 20*time.Second, fmt.Sprintf("the audit event of %s %s/%s", verb, namespace, name), func() error {
		f, err := os.Open(cluster.AuditLog)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var ev struct {
				Verb      string `json:"verb"`
				Stage     string `json:"stage"`
				ObjectRef struct {
					Namespace, Name string
				} `json:"objectRef"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Verb == verb && ev.Stage == "ResponseComplete" && ev.ObjectRef.Namespace == namespace && ev.ObjectRef.Name == name {
				return nil
			}
		}
		return fmt.Errorf("not in %s yet", cluster.AuditLog)
	})
}
