package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

var promql = parser.NewParser(parser.Options{})

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// loadRules parses the chart's rules as Prometheus does a rule file:
// unknown fields, invalid expressions, labels or templates are errors. It
// returns the alerts by name; the recording rules are in recordingRules.
func loadRules(t *testing.T) map[string]rulefmt.Rule {
	t.Helper()
	byName := map[string]rulefmt.Rule{}
	for _, g := range parseRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				byName[r.Alert] = r
			}
		}
	}
	return byName
}

// recordingRules are the chart's recording rules, in the order of their
// groups (Prometheus evaluates a group's rules in order).
func recordingRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	var out []rulefmt.Rule
	for _, g := range parseRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

func parseRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(filepath.Join("testdata", "rules.yaml"), false, model.UTF8Validation, promql, quietLogger())
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if (r.Alert == "") == (r.Record == "") {
				t.Fatalf("group %s: a rule that is neither an alert nor a recording rule", g.Name)
			}
		}
	}
	return groups
}

// The labels every series of the release's webhook and controller carry
// once scraped (the chart rendered for release qn in qn-system).
const (
	web  = `namespace="qn-system",job="qn-qn-admission-webhook",pod="qn-qn-admission-webhook-a"`
	webB = `namespace="qn-system",job="qn-qn-admission-webhook",pod="qn-qn-admission-webhook-b"`
	ctl  = `namespace="qn-system",job="qn-qn-admission-controller-metrics",pod="qn-qn-admission-controller-a"`
	// replicas is kube-state-metrics' series for the webhook Deployment.
	replicas = `kube_deployment_status_replicas_available{namespace="qn-system",deployment="qn-qn-admission-webhook"}`
	// ctlPodA and ctlPodB are kube-state-metrics' labels of the two
	// qn-controller containers (the chart's default replicas).
	ctlPodA = `namespace="qn-system",job="kube-state-metrics",pod="qn-qn-admission-controller-7d9f-a",container="qn-controller"`
	ctlPodB = `namespace="qn-system",job="kube-state-metrics",pod="qn-qn-admission-controller-7d9f-b",container="qn-controller"`
)

// controllerRestarts is kube-state-metrics' view of the two qn-controller
// containers: restartsA is container A's restart counter in promqltest's
// syntax (B never restarts), over n+1 samples.
func controllerRestarts(restartsA string, n int) string {
	return lines(
		`kube_pod_container_info{`+ctlPodA+`} 1x`+fmt.Sprint(n),
		`kube_pod_container_info{`+ctlPodB+`} 1x`+fmt.Sprint(n),
		`kube_pod_container_status_restarts_total{`+ctlPodA+`} `+restartsA,
		`kube_pod_container_status_restarts_total{`+ctlPodB+`} 0x`+fmt.Sprint(n))
}

// scenario is series (promqltest's load syntax, one sample every 30s from
// time 0) and whether the alert is firing after `after` of evaluations
// every 30s, which honours the rule's `for`.
type scenario struct {
	series string
	after  time.Duration
	firing bool
}

func lines(series ...string) string { return strings.Join(series, "\n") }

// histogram is the cumulative buckets of a latency histogram whose n
// observations every 30s all fall in bucket le.
func histogram(name, labels, le string, n int) string {
	var b strings.Builder
	reached := false
	for _, bound := range []string{"0.001", "0.01", "0.1", "1", "2.5", "5", "10", "+Inf"} {
		reached = reached || bound == le
		step := 0
		if reached {
			step = n
		}
		fmt.Fprintf(&b, "%s_bucket{%s,%s,le=%q} 0+%dx60\n", name, web, labels, bound, step)
	}
	return b.String()
}

var scenarios = map[string]map[string]scenario{
	"QnAdmissionNoReplicaReady": {
		"no available replica":              {series: lines(replicas+" 0x20", "up{"+web+"} 1x20"), after: 5 * time.Minute, firing: true},
		"no target up":                      {series: lines(replicas+" 2x20", "up{"+web+"} 0x20"), after: 5 * time.Minute, firing: true},
		"two replicas available and up":     {series: lines(replicas+" 2x20", "up{"+web+"} 1x20"), after: 5 * time.Minute},
		"down for less than its for (2m)":   {series: lines(replicas+" 2x20", "up{"+web+"} 1x2 0x2"), after: 90 * time.Second},
		"another namespace's replicas down": {series: lines(`kube_deployment_status_replicas_available{namespace="other",deployment="qn-qn-admission-webhook"} 0x20`, replicas+" 2x20", "up{"+web+"} 1x20"), after: 5 * time.Minute},
	},
	"QnAdmissionLatencyHigh": {
		// 10 requests every 30s, all in the 5s bucket: p99 near 5s, over 2.5s.
		"every request near the timeout": {series: histogram("qn_admission_request_duration_seconds", `webhook="validate"`, "5", 10), after: 15 * time.Minute, firing: true},
		"every request in a millisecond": {series: histogram("qn_admission_request_duration_seconds", `webhook="validate"`, "0.001", 10), after: 15 * time.Minute},
	},
	"QnAdmissionErrors": {
		"5 % of answers are our 500s": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+95x40`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="error",code="500"} 0+5x40`), after: 10 * time.Minute, firing: true},
		"onError allow answers count as errors": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+95x40`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="error",code="200"} 0+5x40`), after: 10 * time.Minute, firing: true},
		"0.5 % of answers are errors": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+995x40`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="error",code="500"} 0+5x40`), after: 10 * time.Minute},
		"denials are not errors": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="denied",code="403"} 0+50x40`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+50x40`), after: 10 * time.Minute},
	},
	"QnAdmissionErrorBudgetBurnFast": {
		// 1,000 answers every 30s; the budget is 0.05 %, the fast burn 12
		// times it (0.6 %).
		"1 % errors for 20 minutes": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+990x80`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="error",code="500"} 0+10x80`), after: 20 * time.Minute, firing: true},
		"0.1 % errors for an hour: burning, but slowly": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+999x130`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="error",code="500"} 0+1x130`), after: time.Hour},
		"a burst of errors that stopped 10 minutes ago": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+990x20 19800+1000x40`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="error",code="500"} 0+10x20 200x40`), after: 30 * time.Minute},
		"no traffic at all": {series: `qn_admission_requests_total{` + web + `,webhook="validate",role="default",decision="allowed",code="200"} 0x80`, after: 20 * time.Minute},
	},
	"QnAdmissionErrorBudgetBurnSlow": {
		// The slow burn: twice the budget (0.1 %) over 6h and 30m.
		"0.2 % errors for 2 hours": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+998x250`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="error",code="500"} 0+2x250`), after: 2 * time.Hour, firing: true},
		"0.05 % errors, the budget's own rate": {series: lines(
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="allowed",code="200"} 0+1999x250`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="default",decision="error",code="500"} 0+1x250`), after: 2 * time.Hour},
	},
	"QnAdmissionPolicyEvalErrors": {
		"a role's evaluations keep failing": {series: `qn_admission_policy_eval_errors_total{` + web + `,role="batch"} 0+1x40`, after: 10 * time.Minute, firing: true},
		"no new failures":                   {series: `qn_admission_policy_eval_errors_total{` + web + `,role="batch"} 3x40`, after: 10 * time.Minute},
	},
	"QnAdmissionPolicyReloadFailing": {
		"failing for 10 minutes":  {series: `qn_admission_policy_reload_failing{` + web + `} 1x40`, after: 10 * time.Minute, firing: true},
		"a failure fixed at once": {series: `qn_admission_policy_reload_failing{` + web + `} 0x10 1x4 0x26`, after: 10 * time.Minute},
	},
	"QnAdmissionPolicyRevisionSkew": {
		"two revisions for 20 minutes": {series: lines(
			`qn_admission_policy_revision_info{`+web+`,revision="sha256:a"} 1x50`,
			`qn_admission_policy_revision_info{`+webB+`,revision="sha256:b"} 1x50`), after: 20 * time.Minute, firing: true},
		"one revision everywhere": {series: lines(
			`qn_admission_policy_revision_info{`+web+`,revision="sha256:a"} 1x50`,
			`qn_admission_policy_revision_info{`+webB+`,revision="sha256:a"} 1x50`), after: 20 * time.Minute},
	},
	"QnAdmissionCertificateExpiresSoon": {
		// time() is the seconds since the start of the test's clock.
		"10 days left": {series: `qn_certificate_expiry_timestamp_seconds{` + web + `} 864000x200`, after: 90 * time.Minute, firing: true},
		"30 days left": {series: `qn_certificate_expiry_timestamp_seconds{` + web + `} 2592000x200`, after: 90 * time.Minute},
	},
	"QnAdmissionCertificateReloadErrors": {
		"a rotated pair cannot be read": {series: `qn_certificate_reload_errors_total{` + web + `} 0x10 1+1x10`, after: 10 * time.Minute, firing: true},
		"no reload errors":              {series: `qn_certificate_reload_errors_total{` + web + `} 0x40`, after: 10 * time.Minute},
	},
	"QnAdmissionWindowRefusalsHigh": {
		"a fifth of realtime's validations refused": {series: lines(
			`qn_admission_window_rejections_total{`+web+`,role="realtime"} 0+2x60`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="realtime",decision="allowed",code="200"} 0+8x60`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="realtime",decision="denied",code="429"} 0+2x60`), after: 20 * time.Minute, firing: true},
		"one refusal in a hundred": {series: lines(
			`qn_admission_window_rejections_total{`+web+`,role="realtime"} 0+1x60`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="realtime",decision="allowed",code="200"} 0+99x60`,
			`qn_admission_requests_total{`+web+`,webhook="validate",role="realtime",decision="denied",code="429"} 0+1x60`), after: 20 * time.Minute},
	},
	"QnAdmissionWindowStoreDown": {
		"Redis down for 5 minutes":        {series: `qn_window_store_up{` + web + `,store="redis"} 0x20`, after: 5 * time.Minute, firing: true},
		"Redis up":                        {series: `qn_window_store_up{` + web + `,store="redis"} 1x20`, after: 5 * time.Minute},
		"the in-memory store is no alarm": {series: `qn_window_store_up{` + web + `,store="memory"} 0x20`, after: 5 * time.Minute},
	},
	"QnAdmissionOverloaded": {
		"429s without a role":                         {series: `qn_admission_requests_total{` + web + `,webhook="validate",role="",decision="denied",code="429"} 0+3x40`, after: 10 * time.Minute, firing: true},
		"429s of a full rate window are not overload": {series: `qn_admission_requests_total{` + web + `,webhook="validate",role="realtime",decision="denied",code="429"} 0+3x40`, after: 10 * time.Minute},
	},
	"QnAdmissionConnectionsSaturated": {
		"connections keep waiting for a slot": {series: `qn_admission_connection_waits_total{` + web + `} 0+2x40`, after: 10 * time.Minute, firing: true},
		"no connection waited":                {series: `qn_admission_connection_waits_total{` + web + `} 5x40`, after: 10 * time.Minute},
	},
	"QnAdmissionStrictHealthFailing": {
		"the errors check fails": {series: `qn_health_check_failing{` + web + `,check="errors"} 1x40`, after: 10 * time.Minute, firing: true},
		"every check passes":     {series: `qn_health_check_failing{` + web + `,check="errors"} 0x40`, after: 10 * time.Minute},
	},
	// The restarts SLO: 0.1 % of the containers' time, 60 s a restart;
	// with two containers the fast burn (1.2 % over 1h and 5m) needs two
	// restarts within the hour and one in the last 5m, the slow burn (0.2
	// % over 6h and 30m) two within 6 hours and one in the last 30m.
	"QnControllerRestartBudgetBurnFast": {
		"crash-looping: a restart every 5 minutes for 40 minutes": {series: controllerRestarts("0+0.1x80", 80), after: 40 * time.Minute, firing: true},
		"two restarts in the hour, the last 3 minutes ago":        {series: controllerRestarts("0x59 1x53 2x6", 120), after: time.Hour, firing: true},
		"two restarts in the hour, the last 30 minutes ago":       {series: controllerRestarts("0x19 1x39 2x60", 120), after: time.Hour},
		"one restart, 3 minutes ago":                              {series: controllerRestarts("0x113 1x6", 120), after: time.Hour},
		"no restarts":                                             {series: controllerRestarts("0x120", 120), after: time.Hour},
	},
	"QnControllerRestartBudgetBurnSlow": {
		"a restart every 90 minutes, the last 10 minutes ago": {series: controllerRestarts("0x190 1x180 2x180 3x20", 570), after: 285 * time.Minute, firing: true},
		"one restart in 6 hours, 10 minutes ago":              {series: controllerRestarts("0x700 1x20", 720), after: 6 * time.Hour},
		"two restarts in 6 hours, the last 2 hours ago":       {series: controllerRestarts("0x200 1x280 2x240", 720), after: 6 * time.Hour},
	},
	"QnControllerDown": {
		"not scraped":                 {series: `up{` + ctl + `} 0x40`, after: 15 * time.Minute, firing: true},
		"no controller series at all": {series: `up{` + web + `} 1x40`, after: 15 * time.Minute, firing: true},
		"up":                          {series: `up{` + ctl + `} 1x40`, after: 15 * time.Minute},
	},
	"QnControllerReconcileErrors": {
		"errors for 20 minutes": {series: `controller_runtime_reconcile_errors_total{` + ctl + `,controller="quantumnode"} 0+1x60`, after: 20 * time.Minute, firing: true},
		"no new errors":         {series: `controller_runtime_reconcile_errors_total{` + ctl + `,controller="quantumnode"} 2x60`, after: 20 * time.Minute},
	},
	"QnScalerAtMaxReplicas": {
		"asking for its max for 40 minutes": {series: lines(
			`qn_scaler_desired_replicas{`+ctl+`,scaler_namespace="shop",scaler="orders"} 10x90`,
			`qn_scaler_max_replicas{`+ctl+`,scaler_namespace="shop",scaler="orders"} 10x90`), after: 40 * time.Minute, firing: true},
		"below its max": {series: lines(
			`qn_scaler_desired_replicas{`+ctl+`,scaler_namespace="shop",scaler="orders"} 6x90`,
			`qn_scaler_max_replicas{`+ctl+`,scaler_namespace="shop",scaler="orders"} 10x90`), after: 40 * time.Minute},
		"at its max for less than 30 minutes": {series: lines(
			`qn_scaler_desired_replicas{`+ctl+`,scaler_namespace="shop",scaler="orders"} 6x40 10x50`,
			`qn_scaler_max_replicas{`+ctl+`,scaler_namespace="shop",scaler="orders"} 10x90`), after: 40 * time.Minute},
	},
	"QnScalerMetricUnavailable": {
		"no reading for 15 minutes": {series: `qn_scaler_metric_available{` + ctl + `,scaler_namespace="shop",scaler="orders"} 0x40`, after: 15 * time.Minute, firing: true},
		"reading":                   {series: `qn_scaler_metric_available{` + ctl + `,scaler_namespace="shop",scaler="orders"} 1x40`, after: 15 * time.Minute},
		"a blip of two minutes":     {series: `qn_scaler_metric_available{` + ctl + `,scaler_namespace="shop",scaler="orders"} 1x20 0x4 1x16`, after: 15 * time.Minute},
	},
	"QnControllerQuantumNodeIsolated": {
		"a node isolated for a minute": {series: `qn_controller_quantumnodes_health{` + ctl + `,health="Isolated"} 0x2 1x10`, after: 5 * time.Minute, firing: true},
		"none isolated, some failed":   {series: lines(`qn_controller_quantumnodes_health{`+ctl+`,health="Isolated"} 0x20`, `qn_controller_quantumnodes_health{`+ctl+`,health="Failed"} 3x20`), after: 5 * time.Minute},
	},
	"QnControllerRemediationBlocked": {
		"maxUnhealthy exceeded for 10 minutes": {series: `qn_controller_remediation_blocked{` + ctl + `,policy="edge"} 1x40`, after: 10 * time.Minute, firing: true},
		"exceeded for 2 minutes, then not":     {series: `qn_controller_remediation_blocked{` + ctl + `,policy="edge"} 1x4 0x36`, after: 10 * time.Minute},
	},
	"QnAdmissionShadowDisagreements": {
		"the candidate refuses what the served set admits": {series: `qn_admission_shadow_disagreements_total{` + web + `,role="default",from="allowed",to="denied"} 0+1x40`, after: 10 * time.Minute, firing: true},
		"no disagreement in the last hour":                 {series: `qn_admission_shadow_disagreements_total{` + web + `,role="default",from="allowed",to="denied"} 0+1x10 10x150`, after: 75 * time.Minute},
	},
	"QnControllerQuantumNodesFailed": {
		"a node Failed for 20 minutes":     {series: lines(`qn_controller_quantumnodes{`+ctl+`,phase="Failed"} 1x50`, `qn_controller_quantumnodes{`+ctl+`,phase="Ready"} 9x50`), after: 20 * time.Minute, firing: true},
		"Failed for 5 minutes, then fixed": {series: `qn_controller_quantumnodes{` + ctl + `,phase="Failed"} 1x10 0x40`, after: 20 * time.Minute},
		"every node Ready":                 {series: lines(`qn_controller_quantumnodes{`+ctl+`,phase="Failed"} 0x50`, `qn_controller_quantumnodes{`+ctl+`,phase="Ready"} 10x50`), after: 20 * time.Minute},
	},
	"QnControllerQuantumNodesNonCompliant": {
		"nodes violate the policies for 40 minutes": {series: `qn_controller_quantumnodes_policy{` + ctl + `,verdict="PolicyViolation"} 3x90`, after: 40 * time.Minute, firing: true},
		"a rule fails to evaluate for 40 minutes":   {series: `qn_controller_quantumnodes_policy{` + ctl + `,verdict="PolicyError"} 1x90`, after: 40 * time.Minute, firing: true},
		"every node compliant or exempt": {series: lines(`qn_controller_quantumnodes_policy{`+ctl+`,verdict="Compliant"} 9x90`, `qn_controller_quantumnodes_policy{`+ctl+`,verdict="Exempt"} 1x90`,
			`qn_controller_quantumnodes_policy{`+ctl+`,verdict="PolicyViolation"} 0x90`), after: 40 * time.Minute},
	},
	"QnControllerRemediationsFailing": {
		"restarts keep failing": {series: lines(`qn_controller_remediations_total{`+ctl+`,action="Restart",result="Started"} 0+1x60`,
			`qn_controller_remediations_total{`+ctl+`,action="Restart",result="Failed"} 0+1x60`), after: 25 * time.Minute, firing: true},
		"a step abandoned": {series: `qn_controller_remediations_total{` + ctl + `,action="Rebuild",result="Abandoned"} 0x10 1x50`, after: 25 * time.Minute, firing: true},
		"restarts succeed": {series: lines(`qn_controller_remediations_total{`+ctl+`,action="Restart",result="Started"} 0+1x60`,
			`qn_controller_remediations_total{`+ctl+`,action="Restart",result="Succeeded"} 0+1x60`, `qn_controller_remediations_total{`+ctl+`,action="Restart",result="Failed"} 0x60`), after: 25 * time.Minute},
	},
	"QnControllerRollbacks": {
		"a change rolled back":        {series: `qn_controller_rollbacks_total{` + ctl + `,performed="true"} 0x10 1x20`, after: 10 * time.Minute, firing: true},
		"a rollback only reported":    {series: `qn_controller_rollbacks_total{` + ctl + `,performed="false"} 0x10 1x20`, after: 10 * time.Minute, firing: true},
		"none in the last hour":       {series: `qn_controller_rollbacks_total{` + ctl + `,performed="true"} 0x5 1x200`, after: 90 * time.Minute},
		"no rollback since the start": {series: `qn_controller_rollbacks_total{` + ctl + `,performed="true"} 0x40`, after: 15 * time.Minute},
	},
	"QnScalerUnableToScale": {
		"no target for 15 minutes":  {series: `qn_scaler_able_to_scale{` + ctl + `,scaler_namespace="shop",scaler="orders"} 0x40`, after: 15 * time.Minute, firing: true},
		"able to scale":             {series: `qn_scaler_able_to_scale{` + ctl + `,scaler_namespace="shop",scaler="orders"} 1x40`, after: 15 * time.Minute},
		"a failed write, then fine": {series: `qn_scaler_able_to_scale{` + ctl + `,scaler_namespace="shop",scaler="orders"} 1x10 0x4 1x26`, after: 15 * time.Minute},
	},
	"QnControllerStrictHealthFailing": {
		"the policies check fails":                    {series: `qn_health_check_failing{` + ctl + `,check="policies"} 1x40`, after: 10 * time.Minute, firing: true},
		"the webhook's check is not the controller's": {series: `qn_health_check_failing{` + web + `,check="policies"} 1x40`, after: 10 * time.Minute},
	},
}

func TestEveryAlertHasScenarios(t *testing.T) {
	defined := loadRules(t)
	for name := range defined {
		var firing, quiet int
		for _, s := range scenarios[name] {
			if s.firing {
				firing++
			} else {
				quiet++
			}
		}
		if firing == 0 || quiet == 0 {
			t.Errorf("%s: %d firing and %d quiet scenarios, want at least one of each", name, firing, quiet)
		}
	}
	for name := range scenarios {
		if _, ok := defined[name]; !ok {
			t.Errorf("scenarios for %s, which the chart does not define", name)
		}
	}
}

func TestAlertsFireWhenTheyShould(t *testing.T) {
	defined := loadRules(t)
	recorded := recordingRules(t)
	for alert, cases := range scenarios {
		rule, ok := defined[alert]
		if !ok {
			continue // reported by TestEveryAlertHasScenarios
		}
		for name, sc := range cases {
			t.Run(alert+"/"+name, func(t *testing.T) {
				if got := firing(t, rule, recorded, sc); got != sc.firing {
					t.Errorf("firing = %v after %s, want %v\nexpr: %s\nseries:\n%s", got, sc.after, sc.firing, rule.Expr, sc.series)
				}
			})
		}
	}
}

// firing evaluates rule every 30s over the scenario's series, as the rule
// manager would, after the recording rules it may read (their samples
// written back, as Prometheus writes them), and says whether the alert is
// firing at the end.
func firing(t *testing.T, rule rulefmt.Rule, recorded []rulefmt.Rule, sc scenario) bool {
	t.Helper()
	storage := promqltest.LoadedStorage(t, "load 30s\n"+indent(sc.series))
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1_000_000)
	expr, err := promql.ParseExpr(rule.Expr)
	if err != nil {
		t.Fatal(err)
	}
	ar := rules.NewAlertingRule(rule.Alert, expr, time.Duration(rule.For), 0,
		labels.FromMap(rule.Labels), labels.FromMap(rule.Annotations), labels.EmptyLabels(), "", false, quietLogger())
	var records []*rules.RecordingRule
	for _, r := range recorded {
		if !strings.Contains(rule.Expr, r.Record) {
			continue
		}
		e, err := promql.ParseExpr(r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, rules.NewRecordingRule(r.Record, e, labels.FromMap(r.Labels)))
	}
	query := rules.EngineQueryFunc(engine, storage)
	ctx := context.Background()
	for at := time.Duration(0); at <= sc.after; at += 30 * time.Second {
		ts := time.Unix(0, 0).Add(at)
		for _, rr := range records {
			vec, err := rr.Eval(ctx, 0, ts, query, nil, 0)
			if err != nil {
				t.Fatalf("record %s at %s: %v", rr.Name(), at, err)
			}
			app := storage.Appender(ctx)
			for _, s := range vec {
				if _, err := app.Append(0, s.Metric, ts.UnixMilli(), s.F); err != nil {
					t.Fatalf("write %s at %s: %v", rr.Name(), at, err)
				}
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ar.Eval(ctx, 0, ts, query, nil, 0); err != nil {
			t.Fatalf("evaluate at %s: %v", at, err)
		}
	}
	for _, a := range ar.ActiveAlerts() {
		if a.State == rules.StateFiring {
			return true
		}
	}
	return false
}

func indent(series string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(series), "\n") {
		b.WriteString("  " + strings.TrimSpace(line) + "\n")
	}
	return b.String()
}

// qnMetric matches the name of one of our series in PromQL.
var qnMetric = regexp.MustCompile(`\bqn_[a-z_]+`)

// exported lists the series names the binaries declare: every "qn_..."
// string literal in qn-admission's Go source outside tests.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	literal := regexp.MustCompile(`"(qn_[a-z_]+)"`)
	err := filepath.WalkDir(filepath.Join("..", ".."), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "alerts" || d.Name() == ".git" || d.Name() == "charts" || d.Name() == "docs") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("found only %v in the source: has the way metrics are declared changed?", names)
	}
	return names
}

// known reports whether a series name is one the binaries export, as is or
// as a histogram's _bucket, _count or _sum.
func known(names map[string]bool, series string) bool {
	for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(series, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// recordedName matches a recorded series' name (level:metric:operations).
var recordedName = regexp.MustCompile(`\b[a-z_]+:[a-z_]+:[a-z_0-9]+`)

func TestAlertsReadOnlySeriesTheBinariesExport(t *testing.T) {
	names := exported(t)
	recorded := map[string]bool{}
	check := func(name, expr string) {
		for _, r := range recordedName.FindAllString(expr, -1) {
			if !recorded[r] {
				t.Errorf("%s reads %s, which no recording rule before it records", name, r)
			}
		}
		for _, series := range qnMetric.FindAllString(recordedName.ReplaceAllString(expr, ""), -1) {
			if !known(names, series) {
				t.Errorf("%s reads %s, which no binary exports", name, series)
			}
		}
	}
	for _, r := range recordingRules(t) {
		check(r.Record, r.Expr)
		recorded[r.Record] = true
	}
	for name, rule := range loadRules(t) {
		check(name, rule.Expr)
	}
}

// The dashboard's queries parse as PromQL (Grafana's variables replaced by
// values) and read only series the binaries export.
func TestDashboardQueriesParse(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "qn-admission", "files", "dashboards", "qn-admission.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	names := exported(t)
	variables := strings.NewReplacer("$__rate_interval", "1m", "$namespace", "qn-system")
	n := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			n++
			if _, err := promql.ParseExpr(variables.Replace(target.Expr)); err != nil {
				t.Errorf("panel %q: %v\n%s", p.Title, err, target.Expr)
			}
			for _, series := range qnMetric.FindAllString(target.Expr, -1) {
				if !known(names, series) {
					t.Errorf("panel %q reads %s, which no binary exports", p.Title, series)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no queries in the dashboard")
	}
}
