package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quantumnode/qn-admission/test/harness"
)

func TestInventorySnapshotsAreWhatPoliciesSee(t *testing.T) {
	policiesDir := "../../../docs/examples/inventory"
	snapshot := "testdata/inventory/snapshot.yaml"
	claim := "testdata/inventory/claim.yaml"
	cases := map[string]commandCase{
		"eval against a snapshot refuses a claimed Node, naming its claimants": {
			args:     []string{"eval", claim, "--policy-dir", policiesDir, "--inventory", snapshot, "--webhook", "validate"},
			wantCode: exitFailed,
			want:     []string{`spec.nodeName "worker-1" is already claimed by QuantumNode edge/edge-1`, `already claimed by QuantumNode edge/edge-2`},
		},
		"without a snapshot the rules that read the inventory say nothing, and qnctl says so": {
			args:     []string{"eval", claim, "--policy-dir", policiesDir, "--webhook", "validate"},
			wantCode: exitOK,
			want:     []string{"validating webhook: allowed (200)", "qnctl: warning: ../../../docs/examples/inventory declares an inventory (roles.yaml:", "those rules judge without it and refuse nothing"},
		},
		"audit flags both of two stored claims of one Node": {
			args:     []string{"audit", snapshot, "--policy-dir", policiesDir, "--inventory", snapshot},
			wantCode: exitFailed,
			want:     []string{"edge/edge-1 (role default): [qn.nodeclaim.deny fail]", "edge/edge-2 (role default): [qn.nodeclaim.deny fail]", "0 compliant, 2 non-compliant"},
		},
		"impact judges both sets against the snapshot: routing the claim rule newly fails both claims": {
			args:     []string{"impact", "--base", "testdata/inventory/without-claims", "--proposed", policiesDir, "--inventory", snapshot, snapshot},
			wantCode: exitFailed,
			want:     []string{"edge/edge-1", "edge/edge-2", `already claimed by QuantumNode edge/edge-2`},
		},
		"a snapshot that cannot be read is bad input": {
			args:     []string{"eval", claim, "--policy-dir", policiesDir, "--inventory", "testdata/inventory/missing.yaml"},
			wantCode: exitBadInput,
			want:     []string{"--inventory: inventory: open testdata/inventory/missing.yaml"},
		},
	}
	runCommandCases(t, cases, nil)
}

// Judging a live cluster's QuantumNodes, qnctl reads the inventory the
// set declares from that cluster, as qn-webhook and qn-controller's audit
// do: two stored claims of one Node are both flagged with no --inventory,
// and a snapshot given with --inventory still wins.
func TestAuditAndImpactOfAClusterReadItsInventory(t *testing.T) {
	env, cfg := harness.ControlPlane(t, harness.ControlPlaneOptions{})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readSnapshot("testdata/inventory/snapshot.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_ = c.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "edge"}}})
	for _, doc := range docs {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(doc.JSON); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	path := adminKubeconfig(t, env, "auditor")
	policiesDir := "../../../docs/examples/inventory"
	free := filepath.Join(t.TempDir(), "free.yaml")
	if err := os.WriteFile(free, []byte("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: worker-1}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]commandCase{
		"audit flags both claims from the cluster's own inventory": {
			args:     []string{"audit", "--kubeconfig", path, "--policy-dir", policiesDir},
			wantCode: exitFailed,
			want:     []string{"edge/edge-1 (role default): [qn.nodeclaim.deny fail]", "edge/edge-2 (role default): [qn.nodeclaim.deny fail]", "0 compliant, 2 non-compliant"},
		},
		"a snapshot given with --inventory is what the policies read": {
			args:     []string{"audit", "--kubeconfig", path, "--policy-dir", policiesDir, "--inventory", free},
			wantCode: exitOK,
			want:     []string{"2 compliant, 0 non-compliant"},
		},
		"impact of the cluster: routing the claim rule newly fails both stored claims": {
			args:     []string{"impact", "--cluster", "--kubeconfig", path, "--base", "testdata/inventory/without-claims", "--proposed", policiesDir},
			wantCode: exitFailed,
			want:     []string{"edge/edge-1", "edge/edge-2", "already claimed by QuantumNode edge/edge-2"},
		},
	}
	runCommandCases(t, cases, func(t *testing.T, stderr string) {
		if strings.Contains(stderr, "warning") {
			t.Errorf("a warning of a missing inventory while judging the cluster:\n%s", stderr)
		}
	})
}

// commandCase is one qnctl run: its arguments, exit code and what its
// output must hold.
type commandCase struct {
	args     []string
	wantCode int
	want     []string
}

// runCommandCases runs each case as a subtest, and also, when set, check
// on its stderr.
func runCommandCases(t *testing.T, cases map[string]commandCase, check func(t *testing.T, stderr string)) {
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := run(t, "", tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout+stderr, w) {
					t.Errorf("output lacks %q:\n%s%s", w, stdout, stderr)
				}
			}
			if check != nil {
				check(t, stderr)
			}
		})
	}
}
