package kyverno

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

func load(t *testing.T, src string) *Policy {
	t.Helper()
	docs, err := dialect.Documents("p.yaml", []byte(src))
	if err != nil || len(docs) != 1 {
		t.Fatalf("documents: %v (%d)", err, len(docs))
	}
	p, pr := Parse(docs[0])
	if pr != nil {
		t.Fatalf("parse: %v", pr)
	}
	return p
}

func object(t *testing.T, src string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := sigsyaml.Unmarshal([]byte(src), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func request(op string, obj, old map[string]any) *dialect.Request {
	o := obj
	if o == nil {
		o = old
	}
	api, _ := o["apiVersion"].(string)
	group, version, found := strings.Cut(api, "/")
	if !found {
		group, version = "", api
	}
	meta, _ := o["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	return &dialect.Request{Operation: op, Object: obj, OldObject: old, Namespace: ns, Name: name,
		Kind:     metav1.GroupVersionKind{Group: group, Version: version, Kind: o["kind"].(string)},
		UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"dev"}}}
}

// results renders Results as "rule=status: message" lines.
func results(p *Policy, req *dialect.Request) []string {
	var out []string
	for _, r := range p.Results(context.Background(), req) {
		line := r.Rule + "=" + string(r.Status)
		if r.Message != "" {
			line += ": " + r.Message
		}
		out = append(out, line)
	}
	return out
}

const requireLabels = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-labels
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "label 'team' is required on {{ request.object.metadata.name }}"
      pattern:
        metadata:
          labels:
            team: "?*"
`

const pod = `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {team: a}}
spec:
  containers:
  - {name: app, image: "nginx:1.27"}
  - {name: side, image: "busybox:latest"}
`

func TestPatternRuleAndItsAutogenRules(t *testing.T) {
	p := load(t, requireLabels)
	var names []string
	for _, r := range p.Rules() {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "check-team,autogen-check-team,autogen-cronjob-check-team" {
		t.Fatalf("rules %s, want the rule and Kyverno's two autogen rules", got)
	}
	if got := results(p, request("CREATE", object(t, pod), nil)); strings.Join(got, "|") != "check-team=pass" {
		t.Errorf("labelled Pod: %q", got)
	}
	bare := object(t, strings.Replace(pod, "labels: {team: a}", "labels: {}", 1))
	want := "check-team=fail: validation error: label 'team' is required on web. rule check-team failed at path /metadata/labels/team/"
	if got := results(p, request("CREATE", bare, nil)); strings.Join(got, "|") != want {
		t.Errorf("bare Pod:\n got  %q\n want %q", got, want)
	}
	f := p.Evaluate(context.Background(), request("CREATE", bare, nil))
	if len(f) != 1 || f[0].Warn || f[0].Rule != "check-team" {
		t.Errorf("an Enforce rule's failure is a denial: %+v", f)
	}
	deployment := object(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    metadata: {labels: {}}
    spec: {containers: [{name: app, image: nginx}]}
`)
	// The message's request.object.metadata is shifted to the template's
	// too, which has no name: Kyverno then says the substitution failed,
	// with the matcher's error.
	want = "autogen-check-team=fail: validation error: variables substitution error in rule autogen-check-team execution error: resource value '<nil>' does not match '?*' at path /spec/template/metadata/labels/team/"
	if got := results(p, request("CREATE", deployment, nil)); strings.Join(got, "|") != want {
		t.Errorf("Deployment:\n got  %q\n want %q", got, want)
	}
}

func TestForEachDenyPreconditionsVariablesAndFunctions(t *testing.T) {
	p := load(t, `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: images
  annotations: {pod-policies.kyverno.io/autogen-controllers: none}
spec:
  rules:
  - name: no-latest
    match: {resources: {kinds: [Pod]}}
    preconditions:
      all:
      - key: "{{ request.operation }}"
        operator: AnyIn
        value: [CREATE, UPDATE]
    context:
    - name: banned
      variable: {value: [latest, edge]}
    validate:
      failureAction: Enforce
      message: "{{ to_upper(request.object.metadata.name) }}: tag {{ element.image }} is not allowed"
      foreach:
      - list: request.object.spec.containers
        deny:
          conditions:
            any:
            - key: "{{ split(element.image, ':')[1] || 'latest' }}"
              operator: AnyIn
              value: "{{ banned }}"
  - name: few-containers
    match: {resources: {kinds: [Pod]}}
    validate:
      message: at most {{ max_containers }} containers
      deny:
        conditions:
          all:
          - key: "{{ length(request.object.spec.containers) }}"
            operator: GreaterThan
            value: "{{ max_containers }}"
    context:
    - name: max_containers
      variable: {jmesPath: "request.object.metadata.annotations.\"max\" || '1'", default: 1}
`)
	got := results(p, request("CREATE", object(t, pod), nil))
	want := []string{
		"no-latest=fail: validation failure: WEB: tag busybox:latest is not allowed",
		"few-containers=fail: at most 1 containers",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("results:\n got  %q\n want %q", got, want)
	}
	f := p.Evaluate(context.Background(), request("CREATE", object(t, pod), nil))
	if len(f) != 2 || f[0].Warn || !f[1].Warn {
		t.Errorf("findings %+v: the Enforce rule denies, the rule without failureAction warns (Kyverno's default is Audit)", f)
	}
	if got := results(p, request("DELETE", nil, object(t, pod))); len(got) == 0 || got[0] != "no-latest=skip: preconditions not met" {
		t.Errorf("DELETE: %q, want the precondition to skip no-latest", got)
	}
}

func TestExistingViolationsAndMatchExclude(t *testing.T) {
	p := load(t, strings.Replace(requireLabels, "      any:\n      - resources:\n          kinds: [Pod]\n",
		"      any:\n      - resources:\n          kinds: [Pod]\n          operations: [CREATE, UPDATE]\n    exclude:\n      any:\n      - subjects: [{kind: User, name: \"system:*\"}]\n      - resources: {namespaces: [kube-*]}\n", 1))
	bare := object(t, strings.Replace(pod, "labels: {team: a}", "labels: {}", 1))
	if got := results(p, request("UPDATE", bare, bare)); strings.Join(got, "|") != "check-team=skip: skipping the rule evaluation as pre-existing violations are allowed" {
		t.Errorf("an update of an object that already broke the rule: %q", got)
	}
	labelled := object(t, pod)
	if got := results(p, request("UPDATE", bare, labelled)); len(got) != 1 || !strings.HasPrefix(got[0], "check-team=fail") {
		t.Errorf("an update that breaks the rule: %q", got)
	}
	admin := request("CREATE", bare, nil)
	admin.UserInfo.Username = "system:admin"
	if got := results(p, admin); len(got) != 0 {
		t.Errorf("an excluded subject: %q", got)
	}
	inKubeSystem := object(t, strings.Replace(strings.Replace(pod, "labels: {team: a}", "labels: {}", 1), "namespace: shop", "namespace: kube-system", 1))
	if got := results(p, request("CREATE", inKubeSystem, nil)); len(got) != 0 {
		t.Errorf("an excluded namespace: %q", got)
	}
	if rules := p.Rules(); len(rules[0].RequesterReads) != 1 || rules[0].RequesterReads[0] != "request.userInfo" {
		t.Errorf("a rule that matches subjects reads the requester: %+v", rules[0])
	}
	bg := request("CREATE", bare, nil)
	bg.Background = true
	if got := results(p, bg); len(got) != 0 {
		t.Errorf("in the background a rule that reads the requester is not judged: %q", got)
	}
}

func TestWhatCannotBeJudgedIsRefusedAtItsLine(t *testing.T) {
	for name, tc := range map[string]struct{ edit, want string }{
		"apiCall": {
			"  rules:\n  - name: check-team\n", "  rules:\n  - name: check-team\n    context:\n    - name: ns\n      apiCall: {urlPath: /api/v1/namespaces}\n",
		},
		"mutate":   {"    validate:\n", "    mutate: {patchStrategicMerge: {}}\n    validate:\n"},
		"roles":    {"      - resources:\n", "      - clusterRoles: [admin]\n        resources:\n"},
		"function": {`{{ request.object.metadata.name }}`, `{{ random('[a-z]{4}') }}`},
		"typo":     {"    validate:\n", "    validat3: {}\n    validate:\n"},
	} {
		t.Run(name, func(t *testing.T) {
			src := strings.Replace(requireLabels, tc.edit, tc.want, 1)
			docs, _ := dialect.Documents("p.yaml", []byte(src))
			_, pr := Parse(docs[0])
			if pr == nil {
				t.Fatal("loaded; want a problem naming the feature")
			}
			if pr.File != "p.yaml" || pr.Line < 8 {
				t.Errorf("problem %v does not point into the rule", pr)
			}
			t.Log(pr)
		})
	}
}
