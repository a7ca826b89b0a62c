package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/quantumnode/qn-admission/test/harness"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestAudit(t *testing.T) {
	for name, tc := range map[string]struct {
		args    []string
		code    int
		stdout  []string // lines, in order; nil: no output
		stderr  []string // parts of stderr
		noStdin bool
	}{
		"a snapshot prints one line per non-compliant node and exits 1": {
			args: []string{"audit", "testdata/audit/snapshot.yaml", "--policy-dir", testPolicies},
			code: exitFailed,
			stdout: []string{
				"demo/n2 (role standard): [demo.nodes.deny fail] spec.hardware.arch must be amd64 or arm64; [demo.nodes.deny fail] spec.services must not be empty",
				`edge/n4 (role gpu): [roles.yaml.qn-role fail] annotation qn-role="gpu" names no known role; known roles: standard, strict`,
			},
			stderr: []string{
				"4 QuantumNodes judged with policies testdata/policies (revision sha256:", "2 compliant, 2 non-compliant, 0 exempt",
				"1 object that is not a QuantumNode was left out",
				// The strict role's owner rule reads the requester: n3 is
				// not failed for want of one, and the rule is named.
				"skipped demo.strict.deny at strict.rego:3: reads input.context.user, which only an admission request has",
			},
		},
		"--namespace judges only that namespace": {
			args:   []string{"audit", "testdata/audit/snapshot.yaml", "--policy-dir", testPolicies, "-n", "edge"},
			code:   exitFailed,
			stdout: []string{`edge/n4 (role gpu): [roles.yaml.qn-role fail] annotation qn-role="gpu" names no known role; known roles: standard, strict`},
			stderr: []string{"2 QuantumNodes judged", "1 compliant, 1 non-compliant"},
		},
		"a YAML stream of compliant nodes exits 0 and prints nothing on stdout": {
			args:   []string{"audit", "testdata/audit/compliant.yaml", "--policy-dir", testPolicies},
			code:   exitOK,
			stderr: []string{"2 QuantumNodes judged", "2 compliant, 0 non-compliant"},
		},
		"an audit of nothing says so and fails: an empty snapshot proves nothing": {
			args:   []string{"audit", "testdata/audit/empty.yaml", "--policy-dir", testPolicies},
			code:   exitBadInput,
			stderr: []string{"0 QuantumNodes judged", "nothing was audited: testdata/audit/empty.yaml holds no QuantumNode (0 other objects); --allow-empty accepts that"},
		},
		"an empty snapshot with --allow-empty is an empty cluster": {
			args:   []string{"audit", "testdata/audit/empty.yaml", "--policy-dir", testPolicies, "--allow-empty"},
			code:   exitOK,
			stderr: []string{"0 QuantumNodes judged"},
		},
		"a namespace without nodes is named": {
			args:   []string{"audit", "testdata/audit/compliant.yaml", "--policy-dir", testPolicies, "-n", "nowhere"},
			code:   exitBadInput,
			stderr: []string{"nothing was audited: testdata/audit/compliant.yaml in namespace nowhere holds no QuantumNode"},
		},
		"the bundled policies judge when no --policy-dir is given": {
			args: []string{"audit", "testdata/audit/snapshot.yaml"},
			code: exitFailed,
			stdout: []string{
				`demo/n2 (role default): [qn.quantumnode.deny fail] spec.hardware.arch "riscv" is not supported; use one of amd64, arm64; [qn.quantumnode.deny fail] spec.services must list at least one service`,
				`edge/n3 (role strict): [roles.yaml.qn-role fail] annotation qn-role="strict" names no known role; known roles: batch, default, realtime`,
				`edge/n4 (role gpu): [roles.yaml.qn-role fail] annotation qn-role="gpu" names no known role; known roles: batch, default, realtime`,
			},
			stderr: []string{"judged with policies bundled", "skipped qn.window.warn at window.rego:"},
		},
		"a file that is not YAML is an input error": {
			args:   []string{"audit", "testdata/policies/nodes.rego"},
			code:   exitBadInput,
			stderr: []string{"testdata/policies/nodes.rego"},
		},
		"an unknown output format is a usage error": {
			args:   []string{"audit", "testdata/audit/empty.yaml", "-o", "table"},
			code:   exitBadInput,
			stderr: []string{`--output "table" is not one of text, json`},
		},
		"without a file or a cluster it says so": {
			args:   []string{"audit", "--kubeconfig", "testdata/audit/no-such-kubeconfig"},
			code:   exitBadInput,
			stderr: []string{"no FILE given and no cluster to read QuantumNodes from"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			want := ""
			if tc.stdout != nil {
				want = strings.Join(tc.stdout, "\n") + "\n"
			}
			if out != want {
				t.Errorf("stdout\n%s\nwant\n%s", out, want)
			}
			for _, part := range tc.stderr {
				if !strings.Contains(errOut, part) {
					t.Errorf("stderr does not say %q:\n%s", part, errOut)
				}
			}
		})
	}
}

func TestAuditJSONListsEveryRuleOfEveryNode(t *testing.T) {
	code, out, errOut := run(t, "", "audit", "testdata/audit/snapshot.yaml", "--policy-dir", testPolicies, "-o", "json")
	if code != exitFailed {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var nodes []struct {
		Namespace, Name, Role string
		Compliant             bool
		Rules                 []struct{ Package, Rule, Verdict string }
	}
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	got := map[string]string{}
	for _, n := range nodes {
		var rules []string
		for _, r := range n.Rules {
			rules = append(rules, r.Package+"."+r.Rule+"="+r.Verdict)
		}
		got[n.Namespace+"/"+n.Name] = strings.Join(rules, " ")
	}
	want := map[string]string{
		"demo/n1": "demo.nodes.deny=pass demo.nodes.warn=pass",
		"demo/n2": "demo.nodes.deny=fail demo.nodes.warn=pass",
		"edge/n3": "demo.nodes.deny=pass demo.nodes.warn=pass demo.strict.deny=skip",
		"edge/n4": "roles.yaml.qn-role=fail",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("nodes %v", got)
	}
}

// qnctl audit with no file reads the cluster of the kubeconfig, as a user
// who may only list QuantumNodes would.
func TestAuditReadsALiveCluster(t *testing.T) {
	env, cfg := harness.ControlPlane(t, harness.ControlPlaneOptions{})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readSnapshot("testdata/audit/snapshot.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(doc.JSON); err != nil {
			t.Fatal(err)
		}
		if obj.GetKind() != "QuantumNode" {
			continue
		}
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": obj.GetNamespace()}}}
		_ = c.Create(context.Background(), ns)
		// n2 is what a cluster holds only if the schema was bypassed; the
		// apiserver refuses it here, so the live audit judges three nodes.
		if err := c.Create(context.Background(), obj); err != nil && obj.GetName() != "n2" {
			t.Fatalf("create %s: %v", obj.GetName(), err)
		}
	}
	path := adminKubeconfig(t, env, "auditor")
	code, out, errOut := run(t, "", "audit", "--kubeconfig", path, "--policy-dir", testPolicies)
	if code != exitFailed {
		t.Errorf("exit %d, want %d: %s", code, exitFailed, errOut)
	}
	want := `edge/n4 (role gpu): [roles.yaml.qn-role fail] annotation qn-role="gpu" names no known role; known roles: standard, strict` + "\n"
	if out != want {
		t.Errorf("stdout\n%s\nwant\n%s", out, want)
	}
	if !strings.Contains(errOut, "3 QuantumNodes judged") {
		t.Errorf("stderr: %s", errOut)
	}
}
