package app

import (
	"strings"
	"testing"
)

func TestInventorySnapshotsAreWhatPoliciesSee(t *testing.T) {
	policiesDir := "../../../docs/examples/inventory"
	snapshot := "testdata/inventory/snapshot.yaml"
	claim := "testdata/inventory/claim.yaml"
	cases := map[string]struct {
		args     []string
		wantCode int
		want     []string
	}{
		"eval against a snapshot refuses a claimed Node, naming its claimants": {
			args:     []string{"eval", claim, "--policy-dir", policiesDir, "--inventory", snapshot, "--webhook", "validate"},
			wantCode: exitFailed,
			want:     []string{`spec.nodeName "worker-1" is already claimed by QuantumNode edge/edge-1`, `already claimed by QuantumNode edge/edge-2`},
		},
		"without a snapshot the rules that read the inventory say nothing": {
			args:     []string{"eval", claim, "--policy-dir", policiesDir, "--webhook", "validate"},
			wantCode: exitOK,
			want:     []string{"validating webhook: allowed (200)"},
		},
		"audit flags both of two stored claims of one Node": {
			args:     []string{"audit", snapshot, "--policy-dir", policiesDir, "--inventory", snapshot},
			wantCode: exitFailed,
			want:     []string{"edge/edge-1 (role default): [qn.nodeclaim.deny fail]", "edge/edge-2 (role default): [qn.nodeclaim.deny fail]", "0 compliant, 2 non-compliant"},
		},
		"a snapshot that cannot be read is bad input": {
			args:     []string{"eval", claim, "--policy-dir", policiesDir, "--inventory", "testdata/inventory/missing.yaml"},
			wantCode: exitBadInput,
			want:     []string{"--inventory: inventory: open testdata/inventory/missing.yaml"},
		},
	}
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
		})
	}
}
