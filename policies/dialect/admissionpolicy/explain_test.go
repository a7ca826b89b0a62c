package admissionpolicy_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/quantumnode/qn-admission/policies/dialect"
	"github.com/quantumnode/qn-admission/policies/dialect/admissionpolicy"
)

const armAndPorts = "  validations:\n  - expression: object.spec.hardware.arch == 'arm64'\n    message: only arm64 nodes\n" +
	"  - expression: \"!has(object.spec.services) || object.spec.services.all(s, s.port >= 1024)\"\n"

// TestVerdicts: a verdict per validation, those that hold included; none
// when the policy leaves the request out.
func TestVerdicts(t *testing.T) {
	amd := qnRequest("CREATE", quantumNode("n1", map[string]string{"tier": "edge"}, "amd64", 80), nil)
	arm := qnRequest("CREATE", quantumNode("n1", map[string]string{"tier": "edge"}, "arm64"), nil)
	v := func(rule, status, msg string, line int) dialect.Verdict {
		return dialect.Verdict{Rule: rule, Status: status, Message: msg, Line: line}
	}
	cases := map[string]struct {
		policy string
		req    *dialect.Request
		want   []dialect.Verdict
	}{
		"each validation has its verdict, with its line": {
			vap("p", armAndPorts), amd,
			[]dialect.Verdict{v("validations[0]", "fail", "only arm64 nodes", 13), v("validations[1]", "fail", "failed expression: !has(object.spec.services) || object.spec.services.all(s, s.port >= 1024)", 15)},
		},
		"validations that hold pass": {
			vap("p", armAndPorts), arm,
			[]dialect.Verdict{v("validations[0]", "pass", "", 13), v("validations[1]", "pass", "", 15)},
		},
		"a failure of a policy that only warns is a warning": {
			kyvernoPolicy("p", "  validationActions: [Warn]\n"+armOnly), amd,
			[]dialect.Verdict{{Rule: "validations[0]", Status: "fail", Message: "only arm64 nodes", Warn: true, Line: 14}},
		},
		"an evaluation error under failurePolicy Fail is an error": {
			vap("p", "  failurePolicy: Fail\n  validations:\n  - expression: object.metadata.labels['zone'] == 'a'\n"), amd,
			[]dialect.Verdict{v("validations[0]", "error", "expression 'object.metadata.labels['zone'] == 'a'' resulted in error: no such key: zone", 14)},
		},
		"an evaluation error under failurePolicy Ignore is skipped": {
			vap("p", "  failurePolicy: Ignore\n  validations:\n  - expression: object.metadata.labels['zone'] == 'a'\n"), amd,
			[]dialect.Verdict{v("validations[0]", "skip", "ignored (failurePolicy Ignore): expression 'object.metadata.labels['zone'] == 'a'' resulted in error: no such key: zone", 14)},
		},
		"a match condition that cannot be evaluated under Fail is an error of the policy": {
			vap("p", "  matchConditions:\n  - name: zone\n    expression: object.metadata.labels['zone'] == 'a'\n"+armOnly), amd,
			[]dialect.Verdict{v("", "error", "expression 'object.metadata.labels['zone'] == 'a'' resulted in error: no such key: zone", 1)},
		},
		"match conditions that leave the request out give no verdict": {
			vap("p", "  matchConditions:\n  - name: core\n    expression: \"object.metadata.labels['tier'] == 'core'\"\n"+armOnly), amd, nil,
		},
		"match constraints that leave the request out give no verdict": {
			vap("p", armOnly), qnRequest("DELETE", nil, quantumNode("n1", nil, "amd64")), nil,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := read(t, map[string]string{"p.yaml": c.policy})["p"].(dialect.Explainer)
			if got := p.Verdicts(context.Background(), c.req); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestJudge: what Kyverno's CLI needs besides the verdicts: whether the
// constraints and the conditions took the request in, and which failures
// have no message of their own.
func TestJudge(t *testing.T) {
	amd := qnRequest("CREATE", quantumNode("n1", map[string]string{"tier": "edge"}, "amd64", 80), nil)
	judge := func(policy string, req *dialect.Request) admissionpolicy.Judgement {
		return read(t, map[string]string{"p.yaml": policy})["p"].(*admissionpolicy.Policy).Judge(context.Background(), req)
	}
	j := judge(kyvernoPolicy("p", "  matchConditions:\n  - name: core\n    expression: \"object.metadata.labels['tier'] == 'core'\"\n"+armOnly), amd)
	if !j.Applies || j.Conditions || len(j.Verdicts) > 0 {
		t.Errorf("match conditions that leave the request out: got %+v, want Applies and no Conditions", j)
	}
	j = judge(kyvernoPolicy("p", armAndPorts), amd)
	if !j.Applies || !j.Conditions || len(j.Verdicts) != 2 || j.Verdicts[0].Unexplained || !j.Verdicts[1].Unexplained || j.Verdicts[1].Index != 1 {
		t.Errorf("two failures, the second without a message: got %+v", j)
	}
	j = judge(vap("p", "  failurePolicy: Ignore\n  validations:\n  - expression: object.metadata.labels['zone'] == 'a'\n"), amd)
	if len(j.Verdicts) != 1 || j.Verdicts[0].Status != "error" || !j.Verdicts[0].Ignored {
		t.Errorf("an error under Ignore: got %+v, want one ignored error", j)
	}
	j = judge(vap("p", armOnly), qnRequest("DELETE", nil, quantumNode("n1", nil, "amd64")))
	if j.Applies || j.Conditions || len(j.Verdicts) > 0 {
		t.Errorf("a DELETE the constraints leave out: got %+v", j)
	}
}
