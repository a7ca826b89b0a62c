package admissionpolicy_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

// bindingDoc binds policy with actions and the rest of its spec.
func bindingDoc(name, policy, actions, more string) string {
	return fmt.Sprintf("---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: %s}\nspec:\n  policyName: %s\n  validationActions: %s\n%s", name, policy, actions, more)
}

const armOnly = "  validations:\n  - expression: object.spec.hardware.arch == 'arm64'\n    message: only arm64 nodes\n"

// TestFeatures: each part of a policy, judged on QuantumNode requests.
func TestFeatures(t *testing.T) {
	amd := qnRequest("CREATE", quantumNode("n1", map[string]string{"tier": "edge"}, "amd64"), nil)
	arm := qnRequest("CREATE", quantumNode("n1", map[string]string{"tier": "edge"}, "arm64"), nil)
	deny := func(rule, msg string) dialect.Finding { return dialect.Finding{Rule: rule, Message: msg} }
	warn := func(rule, msg string) dialect.Finding { return dialect.Finding{Rule: rule, Message: msg, Warn: true} }
	type check struct {
		req  *dialect.Request
		want []dialect.Finding
	}
	cases := map[string]struct {
		files  map[string]string
		checks []check
	}{
		"a policy with no binding is enforced: the role table binds it": {
			map[string]string{"p.yaml": vap("p", armOnly)},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "only arm64 nodes")}}, {arm, nil}},
		},
		"messageExpression, reason and variables compose as in the API server": {
			map[string]string{"p.yaml": vap("p", "  variables:\n  - name: arch\n    expression: object.spec.hardware.arch\n  validations:\n  - expression: variables.arch == 'arm64'\n    messageExpression: \"'arch ' + variables.arch + ' is refused'\"\n    message: fallback\n    reason: Forbidden\n")},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "arch amd64 is refused")}}},
		},
		"a message expression that fails falls back to the message": {
			map[string]string{"p.yaml": vap("p", "  validations:\n  - expression: object.spec.hardware.arch == 'arm64'\n    messageExpression: \"'zone ' + object.metadata.labels['zone']\"\n    message: fallback\n")},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "fallback")}}},
		},
		"without a message the expression is the message": {
			map[string]string{"p.yaml": vap("p", "  validations:\n  - expression: object.spec.hardware.arch == 'arm64'\n")},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "failed expression: object.spec.hardware.arch == 'arm64'")}}},
		},
		"matchConditions decide whether the policy applies": {
			map[string]string{"p.yaml": vap("p", "  matchConditions:\n  - name: edge-tier\n    expression: \"has(object.metadata.labels) && object.metadata.labels['tier'] == 'core'\"\n"+armOnly)},
			[]check{{amd, nil}},
		},
		"an objectSelector narrows the policy": {
			map[string]string{"p.yaml": strings.Replace(vap("p", armOnly), "  matchConstraints:\n", "  matchConstraints:\n    objectSelector: {matchLabels: {tier: core}}\n", 1)},
			[]check{{amd, nil}},
		},
		"a namespaceSelector by name narrows the policy": {
			map[string]string{"p.yaml": strings.Replace(vap("p", armOnly), "  matchConstraints:\n", "  matchConstraints:\n    namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [edge]}]}\n", 1),
				"q.yaml": strings.Replace(vap("q", armOnly), "  matchConstraints:\n", "  matchConstraints:\n    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: core}}\n", 1)},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "only arm64 nodes")}}},
		},
		"operations the rules do not name are not judged": {
			map[string]string{"p.yaml": vap("p", armOnly)},
			[]check{{qnRequest("DELETE", nil, quantumNode("n1", nil, "amd64")), nil}},
		},
		"excluded resources and resource names": {
			map[string]string{"p.yaml": strings.Replace(vap("p", armOnly), "  matchConstraints:\n", "  matchConstraints:\n    excludeResourceRules:\n    - {apiGroups: [qn.dev], apiVersions: [\"*\"], resources: [quantumnodes], operations: [CREATE], resourceNames: [n1]}\n", 1)},
			[]check{{amd, nil}, {qnRequest("CREATE", quantumNode("n2", nil, "amd64"), nil), []dialect.Finding{deny("validations[0]", "only arm64 nodes")}}},
		},
		"failurePolicy Fail: an evaluation error denies": {
			map[string]string{"p.yaml": vap("p", "  failurePolicy: Fail\n  validations:\n  - expression: object.metadata.labels['zone'] == 'a'\n")},
			[]check{{amd, []dialect.Finding{{Rule: "validations[0]", Message: "expression 'object.metadata.labels['zone'] == 'a'' resulted in error: no such key: zone", Error: true}}}},
		},
		"failurePolicy Ignore: an evaluation error admits": {
			map[string]string{"p.yaml": vap("p", "  failurePolicy: Ignore\n  validations:\n  - expression: object.metadata.labels['zone'] == 'a'\n")},
			[]check{{amd, nil}},
		},
		"a match condition that fails denies under Fail": {
			map[string]string{"p.yaml": vap("p", "  matchConditions:\n  - name: zone\n    expression: object.metadata.labels['zone'] == 'a'\n"+armOnly)},
			[]check{{amd, []dialect.Finding{{Message: "expression 'object.metadata.labels['zone'] == 'a'' resulted in error: no such key: zone", Error: true}}}},
		},
		"a binding's Warn warns": {
			map[string]string{"p.yaml": vap("p", armOnly) + bindingDoc("b", "p", "[Warn]", "")},
			[]check{{amd, []dialect.Finding{warn("validations[0]", "only arm64 nodes")}}},
		},
		"a binding's Audit alone neither denies nor warns at admission": {
			map[string]string{"p.yaml": vap("p", armOnly) + bindingDoc("b", "p", "[Audit]", "")},
			[]check{{amd, nil}},
		},
		"each binding applies, narrowed by its matchResources": {
			map[string]string{"p.yaml": vap("p", armOnly) +
				bindingDoc("core", "p", "[Deny]", "  matchResources: {objectSelector: {matchLabels: {tier: core}}}\n") +
				bindingDoc("edge", "p", "[Warn]", "  matchResources: {objectSelector: {matchLabels: {tier: edge}}}\n")},
			[]check{{amd, []dialect.Finding{warn("validations[0]", "only arm64 nodes")}}},
		},
		"parameters from a ConfigMap in the request's namespace": {
			map[string]string{
				"p.yaml":      vap("p", "  paramKind: {apiVersion: v1, kind: ConfigMap}\n  validations:\n  - expression: object.spec.hardware.arch in params.data.arches.split(',')\n    messageExpression: \"'arch must be one of ' + params.data.arches\"\n") + bindingDoc("b", "p", "[Deny]", "  paramRef: {name: arches, parameterNotFoundAction: Deny}\n"),
				"params.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: arches, namespace: edge}\ndata: {arches: 'arm64,riscv64'}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: arches, namespace: core}\ndata: {arches: 'amd64'}\n",
			},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "arch must be one of arm64,riscv64")}}, {arm, nil}},
		},
		"parameters by selector: each one judges": {
			map[string]string{
				"p.yaml":      vap("p", "  paramKind: {apiVersion: qn.dev/v1alpha1, kind: ArchLimit}\n  validations:\n  - expression: object.spec.hardware.arch != params.spec.forbidden\n    messageExpression: \"params.spec.forbidden + ' is forbidden'\"\n") + bindingDoc("b", "p", "[Deny]", "  paramRef: {selector: {matchLabels: {set: a}}, parameterNotFoundAction: Allow}\n"),
				"params.yaml": "apiVersion: qn.dev/v1alpha1\nkind: ArchLimit\nmetadata: {name: x, labels: {set: a}}\nspec: {forbidden: amd64}\n---\napiVersion: qn.dev/v1alpha1\nkind: ArchLimit\nmetadata: {name: y, labels: {set: a}}\nspec: {forbidden: arm64}\n---\napiVersion: qn.dev/v1alpha1\nkind: ArchLimit\nmetadata: {name: z, labels: {set: b}}\nspec: {forbidden: riscv64}\n",
			},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "amd64 is forbidden")}}, {arm, []dialect.Finding{deny("validations[0]", "arm64 is forbidden")}}},
		},
		"no parameters and parameterNotFoundAction Deny: refused": {
			map[string]string{
				"p.yaml":      vap("p", "  paramKind: {apiVersion: v1, kind: ConfigMap}\n  validations:\n  - expression: \"params.data.x == 'y'\"\n") + bindingDoc("b", "p", "[Deny]", "  paramRef: {selector: {matchLabels: {none: none}}, parameterNotFoundAction: Deny}\n"),
				"params.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: edge}\ndata: {x: y}\n",
			},
			[]check{{amd, []dialect.Finding{{Message: "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction", Error: true}}}},
		},
		"no parameters and parameterNotFoundAction Allow: not judged": {
			map[string]string{
				"p.yaml": vap("p", "  paramKind: {apiVersion: v1, kind: ConfigMap}\n  validations:\n  - expression: \"params.data.x == 'y'\"\n") + bindingDoc("b", "p", "[Deny]", "  paramRef: {name: missing, parameterNotFoundAction: Allow}\n"),
			},
			[]check{{amd, nil}},
		},
		"an audit annotation that fails denies under Fail": {
			map[string]string{"p.yaml": vap("p", "  auditAnnotations:\n  - key: zone\n    valueExpression: string(object.metadata.labels['zone'])\n")},
			[]check{{amd, []dialect.Finding{{Message: "expression 'string(object.metadata.labels['zone'])' resulted in error: no such key: zone", Error: true}}}, {qnRequest("CREATE", quantumNode("n1", map[string]string{"zone": "a"}, "amd64"), nil), nil}},
		},
		"a Kyverno ValidatingPolicy judges with its validationActions": {
			map[string]string{"p.yaml": kyvernoPolicy("k", "  validationActions: [Warn]\n"+armOnly)},
			[]check{{amd, []dialect.Finding{warn("validations[0]", "only arm64 nodes")}}, {arm, nil}},
		},
		"a Kyverno ValidatingPolicy not enabled for admission is judged only in the background": {
			map[string]string{"p.yaml": kyvernoPolicy("k", "  evaluation: {admission: {enabled: false}}\n"+armOnly)},
			[]check{{amd, nil}},
		},
		"a NamespacedValidatingPolicy judges its namespace only": {
			map[string]string{"p.yaml": strings.Replace(strings.Replace(kyvernoPolicy("k", armOnly), "kind: ValidatingPolicy", "kind: NamespacedValidatingPolicy", 1), "  name: k\n", "  name: k\n  namespace: edge\n", 1),
				"q.yaml": strings.Replace(strings.Replace(kyvernoPolicy("q", armOnly), "kind: ValidatingPolicy", "kind: NamespacedValidatingPolicy", 1), "  name: q\n", "  name: q\n  namespace: core\n", 1)},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "only arm64 nodes")}}},
		},
		"v1beta1 and v1alpha1 ValidatingPolicies read alike": {
			map[string]string{"p.yaml": strings.Replace(kyvernoPolicy("k", armOnly), "policies.kyverno.io/v1", "policies.kyverno.io/v1beta1", 1),
				"q.yaml": strings.Replace(kyvernoPolicy("q", armOnly), "policies.kyverno.io/v1", "policies.kyverno.io/v1alpha1", 1)},
			[]check{{amd, []dialect.Finding{deny("validations[0]", "only arm64 nodes")}}},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			pols := read(t, c.files)
			for i, ch := range c.checks {
				for _, p := range pols {
					if (strings.HasPrefix(name, "a namespaceSelector") || strings.HasPrefix(name, "a NamespacedValidatingPolicy")) && p.Name() == "q" {
						if got := evaluate(p, ch.req); got != nil {
							t.Errorf("check %d: the policy of namespace core judged edge: %+v", i, got)
						}
						continue
					}
					got := evaluate(p, ch.req)
					if !reflect.DeepEqual(got, ch.want) {
						t.Errorf("check %d, %s: got %+v, want %+v", i, p.Name(), got, ch.want)
					}
				}
			}
		})
	}
}

// TestBackground: the audit judges stored objects without a requester.
func TestBackground(t *testing.T) {
	bg := qnRequest("UPDATE", quantumNode("n1", nil, "amd64"), quantumNode("n1", nil, "amd64"))
	bg.Background = true
	bg.UserInfo.Username, bg.UserInfo.Groups = "", nil
	pols := read(t, map[string]string{
		"audit.yaml": vap("audit", armOnly) + bindingDoc("b", "audit", "[Audit]", ""),
		"warn.yaml":  vap("warn", armOnly) + bindingDoc("b2", "warn", "[Warn, Audit]", ""),
		"who.yaml":   vap("who", "  variables:\n  - name: ops\n    expression: \"'qn:operators' in request.userInfo.groups\"\n  validations:\n  - expression: variables.ops || object.spec.hardware.arch == 'arm64'\n  - expression: \"!request.dryRun\"\n  - expression: object.metadata.name != ''\n"),
		"kbg.yaml":   kyvernoPolicy("kbg", "  evaluation: {background: {enabled: false}}\n"+armOnly),
	})
	if got := evaluate(pols["audit"], bg); !reflect.DeepEqual(got, []dialect.Finding{{Rule: "validations[0]", Message: "only arm64 nodes"}}) {
		t.Errorf("Audit in the background is a failure the report shows: %+v", got)
	}
	if got := evaluate(pols["warn"], bg); !reflect.DeepEqual(got, []dialect.Finding{{Rule: "validations[0]", Message: "only arm64 nodes"}}) {
		t.Errorf("Warn and Audit in the background: %+v", got)
	}
	rules := pols["who"].Rules()
	want := [][]string{{"request.userInfo"}, {"request.dryRun"}, nil}
	for i, r := range rules {
		if !reflect.DeepEqual(r.RequesterReads, want[i]) {
			t.Errorf("rule %s reads %v of the requester, want %v", r.Name, r.RequesterReads, want[i])
		}
	}
	if r := pols["kbg"].Rules()[0]; len(r.RequesterReads) != 1 || !strings.Contains(r.RequesterReads[0], "background.enabled: false") {
		t.Errorf("a ValidatingPolicy off in the background: %+v", r)
	}
	if got := evaluate(pols["kbg"], bg); got != nil {
		t.Errorf("a ValidatingPolicy off in the background judged: %+v", got)
	}
}

// TestConcurrentRequests: a loaded policy is shared by every request
// (run with -race).
func TestConcurrentRequests(t *testing.T) {
	pols := read(t, map[string]string{"p.yaml": agreementPolicies})
	done := make(chan []string)
	for g := range 8 {
		go func() {
			var bad []string
			for i := range 50 {
				arch := []string{"arm64", "amd64"}[(g+i)%2]
				req := qnRequest("CREATE", quantumNode(fmt.Sprintf("n%d", i), map[string]string{"team": "ops"}, arch, 8883), nil)
				got := evaluate(pols["allowed-arch"], req)
				if (arch == "amd64") != (len(got) == 1) {
					bad = append(bad, fmt.Sprintf("%s: %+v", arch, got))
				}
			}
			done <- bad
		}()
	}
	for range 8 {
		if bad := <-done; len(bad) > 0 {
			t.Error(bad)
		}
	}
}
