package admissionpolicy_test

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

// podPolicy is a Kyverno ValidatingPolicy of Pods (the kind Kyverno
// generates variants from for Pod controllers) with the spec given.
func podPolicy(name, spec string) string {
	return policyDocument(kindValidatingPolicy, name, `""`, "v1", "pods", spec)
}

const noLatest = "  validations:\n  - expression: \"object.spec.containers.all(c, !c.image.endsWith(':latest'))\"\n    message: no latest tags\n"

// podSpec is a Pod spec of one container of image.
func podSpec(image string, more map[string]any) map[string]any {
	s := map[string]any{"containers": []any{map[string]any{"name": "app", "image": image}}}
	for k, v := range more {
		s[k] = v
	}
	return s
}

// workloadRequest is a request of op on a Pod or Pod controller of kind
// in namespace shop, whose Pod template (or, for a Pod, itself) has spec
// and the labels given; old is the old object's Pod spec, for an UPDATE.
func workloadRequest(op, kind string, spec, old map[string]any, labels map[string]any) *dialect.Request {
	group, version, resource := "apps", "v1", strings.ToLower(kind)+"s"
	switch kind {
	case "Pod":
		group = ""
	case "Job", "CronJob":
		group = "batch"
	}
	object := func(spec map[string]any) map[string]any {
		if spec == nil {
			return nil
		}
		meta := map[string]any{"labels": labels}
		o := map[string]any{"apiVersion": strings.TrimPrefix(group+"/"+version, "/"), "kind": kind,
			"metadata": map[string]any{"name": "w", "namespace": "shop"}}
		switch kind {
		case "Pod":
			o["metadata"].(map[string]any)["labels"] = labels
			o["spec"] = spec
		case "CronJob":
			o["spec"] = map[string]any{"schedule": "0 3 * * *", "jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": meta, "spec": spec}}}}
		default:
			o["spec"] = map[string]any{"template": map[string]any{"metadata": meta, "spec": spec}}
		}
		return o
	}
	return &dialect.Request{
		Operation: op, Object: object(spec), OldObject: object(old),
		Kind:     metav1.GroupVersionKind{Group: group, Version: version, Kind: kind},
		Resource: metav1.GroupVersionResource{Group: group, Version: version, Resource: resource},
		Name:     "w", Namespace: "shop",
	}
}

// TestAutogen: a ValidatingPolicy of Pods judges the Pod template of Pod
// controllers as Kyverno's autogen variants do, its findings named as
// the policy's own.
func TestAutogen(t *testing.T) {
	denied := []dialect.Finding{{Rule: "validations[0]", Message: "no latest tags"}}
	latest, tagged := podSpec("nginx:latest", nil), podSpec("nginx:1.27", nil)
	type check struct {
		req  *dialect.Request
		want []dialect.Finding
	}
	cases := map[string]struct {
		policy string
		checks []check
	}{
		"a Deployment's Pod template is judged as a Pod": {
			podPolicy("p", noLatest),
			[]check{
				{workloadRequest("CREATE", "Pod", latest, nil, nil), denied},
				{workloadRequest("CREATE", "Deployment", latest, nil, nil), denied},
				{workloadRequest("CREATE", "Deployment", tagged, nil, nil), nil},
			},
		},
		"every default controller: DaemonSets, ReplicaSets, StatefulSets, Jobs and CronJobs": {
			podPolicy("p", noLatest),
			[]check{
				{workloadRequest("CREATE", "DaemonSet", latest, nil, nil), denied},
				{workloadRequest("CREATE", "ReplicaSet", latest, nil, nil), denied},
				{workloadRequest("CREATE", "StatefulSet", latest, nil, nil), denied},
				{workloadRequest("CREATE", "Job", latest, nil, nil), denied},
				{workloadRequest("CREATE", "CronJob", latest, nil, nil), denied},
			},
		},
		"a CronJob's Pod template lies under its jobTemplate": {
			podPolicy("p", "  validations:\n  - expression: \"object.spec.containers.all(c, c.image.contains(':'))\"\n    messageExpression: \"'untagged: ' + object.spec.containers.filter(c, !c.image.contains(':')).map(c, c.name).join(', ')\"\n"),
			[]check{
				{workloadRequest("CREATE", "CronJob", podSpec("busybox", nil), nil, nil), []dialect.Finding{{Rule: "validations[0]", Message: "untagged: app"}}},
				{workloadRequest("CREATE", "CronJob", podSpec("busybox:1.36", nil), nil, nil), nil},
			},
		},
		"metadata reads the template's: labels and matchConditions too": {
			podPolicy("p", "  matchConditions:\n  - name: not-exempt\n    expression: \"!has(object.metadata.labels) || !('exempt' in object.metadata.labels)\"\n  validations:\n  - expression: \"has(object.metadata.labels) && 'team' in object.metadata.labels\"\n    message: name the team\n"),
			[]check{
				{workloadRequest("CREATE", "Deployment", tagged, nil, map[string]any{"team": "cart"}), nil},
				{workloadRequest("CREATE", "Deployment", tagged, nil, map[string]any{"app": "web"}), []dialect.Finding{{Rule: "validations[0]", Message: "name the team"}}},
				{workloadRequest("CREATE", "Job", tagged, nil, map[string]any{"exempt": "yes"}), nil},
			},
		},
		"spec.autogen.podControllers.controllers narrows the controllers": {
			podPolicy("p", "  autogen:\n    podControllers:\n      controllers: [deployments, cronjobs]\n"+noLatest),
			[]check{
				{workloadRequest("CREATE", "Deployment", latest, nil, nil), denied},
				{workloadRequest("CREATE", "CronJob", latest, nil, nil), denied},
				{workloadRequest("CREATE", "StatefulSet", latest, nil, nil), nil},
				{workloadRequest("CREATE", "Job", latest, nil, nil), nil},
				{workloadRequest("CREATE", "Pod", latest, nil, nil), denied},
			},
		},
		"an empty list of controllers generates none": {
			podPolicy("p", "  autogen:\n    podControllers:\n      controllers: []\n"+noLatest),
			[]check{
				{workloadRequest("CREATE", "Deployment", latest, nil, nil), nil},
				{workloadRequest("CREATE", "Pod", latest, nil, nil), denied},
			},
		},
		"object.metadata.namespace stays the controller's: the template has none": {
			podPolicy("p", "  matchConditions:\n  - name: in-shop\n    expression: \"has(object.metadata.namespace) && object.metadata.namespace == 'shop'\"\n"+noLatest),
			[]check{
				{workloadRequest("CREATE", "Deployment", latest, nil, nil), denied},
				{workloadRequest("CREATE", "CronJob", latest, nil, nil), denied},
			},
		},
		"UPDATE: oldObject reads the old Pod template": {
			podPolicy("p", "  validations:\n  - expression: \"!(has(object.spec.hostNetwork) && object.spec.hostNetwork) || (has(oldObject.spec.hostNetwork) && oldObject.spec.hostNetwork)\"\n    message: hostNetwork may not be turned on\n"),
			[]check{
				{workloadRequest("UPDATE", "Deployment", podSpec("nginx:1.27", map[string]any{"hostNetwork": true}), podSpec("nginx:1.27", nil), nil),
					[]dialect.Finding{{Rule: "validations[0]", Message: "hostNetwork may not be turned on"}}},
				{workloadRequest("UPDATE", "Deployment", podSpec("nginx:1.27", map[string]any{"hostNetwork": true}), podSpec("nginx:1.26", map[string]any{"hostNetwork": true}), nil), nil},
				{workloadRequest("UPDATE", "CronJob", podSpec("nginx:1.27", map[string]any{"hostNetwork": true}), podSpec("nginx:1.27", nil), nil),
					[]dialect.Finding{{Rule: "validations[0]", Message: "hostNetwork may not be turned on"}}},
			},
		},
		"the variants keep the policy's operations": {
			strings.Replace(podPolicy("p", noLatest), "[CREATE, UPDATE]", "[CREATE]", 1),
			[]check{
				{workloadRequest("UPDATE", "Deployment", latest, latest, nil), nil},
				{workloadRequest("CREATE", "Deployment", latest, nil, nil), denied},
			},
		},
		"the variants keep the policy's namespaceSelector": {
			strings.Replace(podPolicy("p", noLatest), "  matchConstraints:\n", "  matchConstraints:\n    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: core}}\n", 1),
			[]check{{workloadRequest("CREATE", "Deployment", latest, nil, nil), nil}},
		},
		"a policy of more than Pods generates none": {
			strings.Replace(podPolicy("p", noLatest), "resources: [pods]", "resources: [pods, pods/ephemeralcontainers]", 1),
			[]check{
				{workloadRequest("CREATE", "Deployment", latest, nil, nil), nil},
				{workloadRequest("CREATE", "Pod", latest, nil, nil), denied},
			},
		},
		"a policy of any version generates none": {
			strings.Replace(podPolicy("p", noLatest), "apiVersions: [v1]", `apiVersions: ["*"]`, 1),
			[]check{{workloadRequest("CREATE", "Deployment", latest, nil, nil), nil}},
		},
		"a policy with an objectSelector on labels generates none": {
			strings.Replace(podPolicy("p", noLatest), "  matchConstraints:\n", "  matchConstraints:\n    objectSelector: {matchLabels: {app: web}}\n", 1),
			[]check{{workloadRequest("CREATE", "Deployment", latest, nil, map[string]any{"app": "web"}), nil}},
		},
		"a policy with excluded resources generates none": {
			strings.Replace(podPolicy("p", noLatest), "  matchConstraints:\n", "  matchConstraints:\n    excludeResourceRules:\n    - {apiGroups: [\"\"], apiVersions: [v1], resources: [pods], operations: [CREATE], resourceNames: [x]}\n", 1),
			[]check{{workloadRequest("CREATE", "Deployment", latest, nil, nil), nil}},
		},
		"a policy of named Pods generates none": {
			strings.Replace(podPolicy("p", noLatest), "resources: [pods]", "resources: [pods]\n      resourceNames: [w]", 1),
			[]check{
				{workloadRequest("CREATE", "Deployment", latest, nil, nil), nil},
				{workloadRequest("CREATE", "Pod", latest, nil, nil), denied},
			},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := read(t, map[string]string{"p.yaml": c.policy})["p"]
			for i, ch := range c.checks {
				if got := evaluate(p, ch.req); !reflect.DeepEqual(got, ch.want) {
					t.Errorf("check %d (%s %s): got %+v, want %+v", i, ch.req.Operation, ch.req.Kind.Kind, got, ch.want)
				}
			}
		})
	}
}

// TestAutogenRulesAndExplain: a variant's verdicts are the policy's
// rules, at their lines; the audit's rules are the policy's.
func TestAutogenRulesAndExplain(t *testing.T) {
	p := read(t, map[string]string{"p.yaml": podPolicy("p", noLatest)})["p"]
	if got := p.Rules(); len(got) != 1 || got[0].Name != "validations[0]" || got[0].Line != 13 {
		t.Errorf("rules: %+v", got)
	}
	bg := workloadRequest("UPDATE", "StatefulSet", podSpec("nginx:latest", nil), podSpec("nginx:latest", nil), nil)
	bg.Background = true
	if got := evaluate(p, bg); !reflect.DeepEqual(got, []dialect.Finding{{Rule: "validations[0]", Message: "no latest tags"}}) {
		t.Errorf("the audit of a stored StatefulSet: %+v", got)
	}
	got := p.(dialect.Explainer).Verdicts(t.Context(), workloadRequest("CREATE", "Deployment", podSpec("nginx:latest", nil), nil, nil))
	want := []dialect.Verdict{{Rule: "validations[0]", Status: "fail", Message: "no latest tags", Line: 13}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("explain: got %+v, want %+v", got, want)
	}
}

// TestAutogenLoadErrors: a variant that cannot be built is refused at
// load, at its line, saying it is the autogen variant.
func TestAutogenLoadErrors(t *testing.T) {
	// The rewrite lengthens each object.spec by 14 characters (28 for
	// CronJobs): an expression just under CEL's parser limit of 100,000
	// code points compiles for Pods and not for their controllers.
	long := "size('" + strings.Repeat("object.spec ", 8300) + "') > 0"
	cases := map[string]struct {
		file string
		want []string
	}{
		"a rewritten expression that does not compile names the variant": {
			podPolicy("p", "  validations:\n  - expression: 'true'\n  - expression: \""+long+"\"\n"),
			[]string{
				"p.yaml:14: spec.validations[1].expression: the autogen variant for cronjobs (object.spec and object.metadata read as spec.jobTemplate.spec.template.spec and spec.jobTemplate.spec.template.metadata): ",
				"p.yaml:14: spec.validations[1].expression: the autogen variant for daemonsets, deployments, jobs, replicasets, statefulsets (object.spec and object.metadata read as spec.template.spec and spec.template.metadata): ",
			},
		},
		"no variant is compiled for a policy that does not compile": {
			podPolicy("p", "  validations:\n  - expression: object.spec.containers\n"),
			[]string{"p.yaml:13: spec.validations[0].expression: must evaluate to bool"},
		},
		"a controller Kyverno has no variant for offline is refused": {
			podPolicy("p", "  autogen:\n    podControllers:\n      controllers: [deployments, jobsets.v1alpha2.jobset.x-k8s.io]\n"+noLatest),
			[]string{`p.yaml:14: spec.autogen.podControllers.controllers[1]: "jobsets.v1alpha2.jobset.x-k8s.io": qn-admission generates variants for daemonsets, deployments, replicasets, statefulsets, jobs and cronjobs only`},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, problems := readAll(t, map[string]string{"p.yaml": c.file})
			var got []string
			for _, p := range problems {
				got = append(got, p.Error())
			}
			if len(got) != len(c.want) {
				t.Fatalf("problems:\n  %s\nwant %d", strings.Join(got, "\n  "), len(c.want))
			}
			for i, w := range c.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("problem %d:\n  %.400s\nwant it to start\n  %s", i, got[i], w)
				}
			}
		})
	}
}
