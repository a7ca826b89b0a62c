package audit

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
)

func audited(name string, rules ...policies.RuleResult) auditedNode {
	return auditedNode{
		Node:   &qnv1alpha1.QuantumNode{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: 2}},
		Result: policies.AuditResult{Revision: "sha256:abc", Role: "default", Rules: rules},
	}
}

func rule(pkg string, v policies.Verdict, msgs ...string) policies.RuleResult {
	return policies.RuleResult{Package: pkg, Rule: "deny", Verdict: v, Messages: msgs}
}

func TestBuildPolicyReport(t *testing.T) {
	skip := rule("p.requester", policies.VerdictSkip, "not judged in the background: r.rego:3 reads input.context.user")
	report := buildPolicyReport("ns", []auditedNode{
		audited("b", rule("p.arch", policies.VerdictFail, "arch is retired"), skip),
		audited("a", rule("p.arch", policies.VerdictPass), skip),
		audited("c", rule("p.arch", policies.VerdictWarn, "port 80"), rule("p.zone", policies.VerdictError, "timeout"), skip),
	})
	if report.GetName() != ReportName || report.GetNamespace() != "ns" || report.GroupVersionKind() != PolicyReportGVK {
		t.Fatalf("report %s %s/%s", report.GroupVersionKind(), report.GetNamespace(), report.GetName())
	}
	items, _, _ := unstructured.NestedSlice(report.Object, "results")
	var got []string
	for _, it := range items {
		m := it.(map[string]any)
		who := "-"
		if res, ok := m["resources"].([]any); ok {
			who = res[0].(map[string]any)["name"].(string)
		}
		got = append(got, fmt.Sprintf("%s %s.%s=%s: %s", who, m["policy"], m["rule"], m["result"], m["message"]))
	}
	want := []string{
		"b p.arch.deny=fail: arch is retired",
		"c p.zone.deny=error: timeout",
		"c p.arch.deny=warn: port 80",
		"- p.requester.deny=skip: not judged in the background: r.rego:3 reads input.context.user (3 QuantumNodes)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("results\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	summary, _, _ := unstructured.NestedMap(report.Object, "summary")
	wantSummary := map[string]any{"pass": int64(1), "fail": int64(1), "warn": int64(1), "error": int64(1), "skip": int64(3)}
	for k, v := range wantSummary {
		if summary[k] != v {
			t.Errorf("summary.%s = %v, want %v", k, summary[k], v)
		}
	}
}

func TestBuildPolicyReportStaysUnderTheObjectSizeLimit(t *testing.T) {
	var nodes []auditedNode
	for i := range maxReportResults + 10 {
		nodes = append(nodes, audited(fmt.Sprintf("n-%05d", i), rule("p.arch", policies.VerdictFail, strings.Repeat("x", 100))))
	}
	report := buildPolicyReport("ns", nodes)
	items, _, _ := unstructured.NestedSlice(report.Object, "results")
	if len(items) != maxReportResults {
		t.Errorf("%d results, want the cap %d", len(items), maxReportResults)
	}
	if got := report.GetAnnotations()[annotationResultsOmitted]; got != "10" {
		t.Errorf("%s=%q, want 10", annotationResultsOmitted, got)
	}
	if f, _, _ := unstructured.NestedInt64(report.Object, "summary", "fail"); f != int64(len(nodes)) {
		t.Errorf("summary.fail %d: the summary counts every result, listed or not", f)
	}
	data, err := report.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 1<<20 {
		t.Errorf("the report is %d bytes; etcd refuses objects over 1.5 MiB", len(data))
	}
}

func TestPolicyCompliantCondition(t *testing.T) {
	for name, tc := range map[string]struct {
		res     policies.AuditResult
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		"every violation is named with its package and the revision": {
			res:    policies.AuditResult{Revision: "r1", Role: "default", Rules: []policies.RuleResult{rule("p.a", policies.VerdictFail, "one", "two"), rule("p.b", policies.VerdictFail, "three")}},
			status: metav1.ConditionFalse, reason: qnv1alpha1.ReasonPolicyViolation,
			message: `violates policy revision r1, role "default": [p.a] one; [p.a] two; [p.b] three`,
		},
		"an evaluation error is not compliance": {
			res:    policies.AuditResult{Revision: "r1", Role: "default", Rules: []policies.RuleResult{rule("p.a", policies.VerdictError, "timeout")}},
			status: metav1.ConditionFalse, reason: qnv1alpha1.ReasonPolicyError,
			message: `could not be judged by policy revision r1, role "default": [p.a] timeout`,
		},
		"skipped rules are said, not counted as passed": {
			res:    policies.AuditResult{Revision: "r1", Role: "default", Rules: []policies.RuleResult{rule("p.a", policies.VerdictPass), rule("p.b", policies.VerdictSkip)}},
			status: metav1.ConditionTrue, reason: qnv1alpha1.ReasonCompliant,
			message: `complies with policy revision r1, role "default" (1 rules that read the requester are judged only at admission)`,
		},
		"an exempt node is unknown": {
			res:    policies.AuditResult{Revision: "r1", Exempt: "namespace kube-system"},
			status: metav1.ConditionUnknown, reason: qnv1alpha1.ReasonExempt,
			message: "not judged: exempt by the role table (namespace kube-system), policy revision r1",
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := policyCompliantCondition(tc.res, 7)
			if c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message || c.ObservedGeneration != 7 {
				t.Errorf("got %s/%s gen %d: %s\nwant %s/%s: %s", c.Status, c.Reason, c.ObservedGeneration, c.Message, tc.status, tc.reason, tc.message)
			}
		})
	}
}
