package app

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// A scaler as kubectl prints it: spec and the status the controller wrote,
// in the middle of a staged scale-up.
const stagedScaler = `apiVersion: qn.dev/v1alpha1
kind: HorizontalQNScaler
metadata: {name: orders, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: orders}
  maxReplicas: 20
  qnMetric: {query: 'sum(queue_depth{queue="orders"})'}
  thresholds: {upper: "1000", lower: "100"}
  scaleUpStep: 8
  stages:
  - percent: 50
    observeSeconds: 120
    abortWhen:
    - {name: error-ratio, query: 'sum(rate(errors[1m])) / sum(rate(requests[1m]))', operator: ">", threshold: "0.005"}
status:
  currentReplicas: 6
  lastScaleTime: "2026-03-01T12:00:00Z"
  lastScaleUpTime: "2026-03-01T12:00:00Z"
  stage: {index: 1, count: 1, baseReplicas: 2, targetReplicas: 10, replicas: 6, startTime: "2026-03-01T12:00:00Z"}
`

func TestScalerExplain(t *testing.T) {
	sample := "../../../config/samples/horizontalqnscaler.yaml"
	tests := map[string]struct {
		stdin    string
		args     []string
		wantCode int
		want     []string // substrings of stdout, or of stderr when wantCode is 2
	}{
		"above upper: the step, the write and the memory": {
			args: []string{"scaler", "explain", sample, "--value", "1250", "--replicas", "4", "--now", "2026-03-01T12:00:00Z"},
			want: []string{"HorizontalQNScaler default/orders → Deployment orders (apps/v1)",
				"decision    ScaleUp: orders_queue_depth 1250 > upper 1000: +2 replicas (4 → 6)",
				"writes      6 replicas to the target's /scale",
				"remembers   lastScaleTime 2026-03-01T12:00:00Z, lastScaleUpTime 2026-03-01T12:00:00Z", "next poll   in 15s"},
		},
		"inside the band: nothing is written": {
			args: []string{"scaler", "explain", sample, "--value", "500", "--replicas", "4"},
			want: []string{"decision    Hold: orders_queue_depth 500 within [lower 100, upper 1000]: holding 4 replicas", "writes      nothing"},
		},
		"the metric unavailable: the fallback's count": {
			args: []string{"scaler", "explain", sample, "--unavailable", "connection refused", "--replicas", "4"},
			want: []string{"value       unavailable: connection refused", "fallback to 6 after 3 failed polls in a row (1 so far)", "metricFailures 1"},
		},
		"a stage in progress, its condition failing, from stdin: rolled back": {
			stdin: stagedScaler,
			args:  []string{"scaler", "explain", "-", "--value", "1500", "--abort", "error-ratio=0.02", "--now", "2026-03-01T12:00:30Z"},
			want: []string{"decision    StageAbort: stage 1 of 1 aborted: error-ratio 0.02 > 0.005; back to the 2 replicas before the scale-up (6 → 2)",
				"writes      2 replicas"},
		},
		"a stage in progress, its condition not given: the stage holds past its time": {
			stdin: stagedScaler,
			args:  []string{"scaler", "explain", "-", "--value", "1500", "--now", "2026-03-01T12:05:00Z"},
			want:  []string{"abort conditions cannot be read: error-ratio (not given (--abort error-ratio=VALUE))"},
		},
		"a query that does not parse is reported, exit 1": {
			stdin: strings.Replace(stagedScaler, `sum(queue_depth{queue="orders"})`, `sum(queue_depth{queue="orders"}`, 1),
			args:  []string{"scaler", "explain", "-", "--value", "1"}, wantCode: 1,
			want: []string{"query       does not parse: spec.qnMetric.query: 1:32: parse error: unclosed left parenthesis"},
		},
		"neither --value nor --unavailable": {args: []string{"scaler", "explain", sample}, wantCode: 2, want: []string{"give exactly one of --value and --unavailable"}},
		"an abort condition the stage lacks": {stdin: stagedScaler, args: []string{"scaler", "explain", "-", "--value", "1", "--abort", "latency=1"}, wantCode: 2,
			want: []string{"--abort latency: the stage in progress has no abort condition of that name (it has error-ratio)"}},
		"no replicas in the file and none given": {args: []string{"scaler", "explain", sample, "--value", "1"}, wantCode: 2, want: []string{"has no status.currentReplicas: give --replicas"}},
		"a QuantumNode is not a scaler": {stdin: "apiVersion: qn.dev/v1alpha1\nkind: QuantumNode\nmetadata: {name: x}\n", args: []string{"scaler", "explain", "-", "--value", "1"}, wantCode: 2,
			want: []string{`- is apiVersion "qn.dev/v1alpha1" kind "QuantumNode", not qn.dev/v1alpha1, Kind=HorizontalQNScaler`}},
		"a misspelt field is named": {stdin: strings.Replace(stagedScaler, "scaleUpStep", "scaleUpStepp", 1), args: []string{"scaler", "explain", "-", "--value", "1"}, wantCode: 2,
			want: []string{`unknown field "spec.scaleUpStepp"`}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, tt.stdin, tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, out, errOut)
			}
			where := out
			if tt.wantCode == 2 {
				where = errOut
			}
			for _, w := range tt.want {
				if !strings.Contains(where, w) {
					t.Errorf("output lacks %q:\n%s", w, where)
				}
			}
		})
	}
}

func TestScalerExplainJSON(t *testing.T) {
	if _, err := os.Stat("../../../config/samples/horizontalqnscaler.yaml"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "scaler", "explain", "../../../config/samples/horizontalqnscaler.yaml", "--value", "50", "--replicas", "3", "--now", "2026-03-01T12:00:00Z", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got scalerExplanation
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Action != "Hold" || got.ToReplica != 3 || got.Write || got.Memory.BelowLowerSince == nil || !strings.Contains(got.Reason, "stabilization window (300s left)") {
		t.Errorf("explanation %+v", got)
	}
}
