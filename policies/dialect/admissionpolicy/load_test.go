package admissionpolicy_test

import (
	"strings"
	"testing"
)

// policyKind is a policy document's apiVersion and kind.
type policyKind struct{ apiVersion, kind string }

var (
	kindVAP              = policyKind{"admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"}
	kindValidatingPolicy = policyKind{"policies.kyverno.io/v1", "ValidatingPolicy"}
)

// policyDocument is a policy of kind k named name, matching CREATE and
// UPDATE of the resources of group and version, with the rules given
// indented under spec.
func policyDocument(k policyKind, name, group, version, resources, spec string) string {
	return `apiVersion: ` + k.apiVersion + `
kind: ` + k.kind + `
metadata:
  name: ` + name + `
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [` + group + `]
      apiVersions: [` + version + `]
      resources: [` + resources + `]
      operations: [CREATE, UPDATE]
` + spec
}

// vap is a ValidatingAdmissionPolicy of QuantumNodes whose spec is the
// rules given, indented under spec.
func vap(name, spec string) string {
	return policyDocument(kindVAP, name, "qn.dev", `"*"`, "quantumnodes", spec)
}

// kyvernoPolicy is a Kyverno ValidatingPolicy of QuantumNodes.
func kyvernoPolicy(name, spec string) string {
	return policyDocument(kindValidatingPolicy, name, "qn.dev", `"*"`, "quantumnodes", spec)
}

// TestLoadErrorsNameFileLineAndReason: everything a file uses that
// cannot be judged here is refused at load, at its line, with the reason.
func TestLoadErrorsNameFileLineAndReason(t *testing.T) {
	cases := map[string]struct {
		file string
		want string
	}{
		"a misspelt field is unknown at its line": {
			vap("p", "  validations:\n  - expresion: 'true'\n"),
			"p.yaml:13: spec.validations[0].expresion: unknown field",
		},
		"a misspelt binding field is unknown at its line": {
			vap("p", "  validations:\n  - expression: 'true'\n") + "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec:\n  policyName: p\n  validationAction: [Deny]\n",
			"p.yaml:20: spec.validationAction: unknown field",
		},
		"a value of the wrong type says where": {
			vap("p", "  validations:\n  - expression: 'true'\n    message: [a, b]\n"),
			"p.yaml:14: spec.validations.message: a array where string is expected",
		},
		"an expression that does not compile is refused at its line": {
			vap("p", "  validations:\n  - expression: object.spec.hardware.arch\n"),
			"p.yaml:13: spec.validations[0].expression: must evaluate to bool",
		},
		"an undeclared reference is refused": {
			vap("p", "  validations:\n  - expression: \"nosuch.x == 1\"\n"),
			"p.yaml:13: spec.validations[0].expression: compilation failed",
		},
		"a variable that does not compile is refused": {
			vap("p", "  variables:\n  - name: v\n    expression: \"object.spec +\"\n  validations:\n  - expression: 'true'\n"),
			"p.yaml:14: spec.variables[0].expression: compilation failed",
		},
		"the authorizer needs a cluster": {
			vap("p", "  validations:\n  - expression: \"authorizer.group('qn.dev').resource('quantumnodes').check('delete').allowed()\"\n"),
			"p.yaml:13: spec.validations[0].expression: reads authorizer, which needs the cluster's authorizer",
		},
		"request.options are not passed": {
			vap("p", "  validations:\n  - expression: \"!has(request.options.fieldManager)\"\n"),
			"p.yaml:13: spec.validations[0].expression: reads request.options, which qn-admission does not pass to CEL policies",
		},
		"a namespace's labels are not known": {
			vap("p", "  validations:\n  - expression: \"namespaceObject.metadata.labels['env'] == 'prod'\"\n"),
			"p.yaml:13: spec.validations[0].expression: reads namespaceObject.metadata.labels.env: qn-admission is told a request's namespace name",
		},
		"a namespaceSelector on labels other than the name is refused": {
			strings.Replace(vap("p", "  validations:\n  - expression: 'true'\n"), "  matchConstraints:\n", "  matchConstraints:\n    namespaceSelector: {matchLabels: {env: prod}}\n", 1),
			`p.yaml:7: spec.matchConstraints.namespaceSelector: selects namespaces by label "env"`,
		},
		"matchConstraints are required": {
			"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\nspec:\n  validations:\n  - expression: 'true'\n",
			"p.yaml:4: spec.matchConstraints: matchConstraints is required",
		},
		"an unknown operation is refused": {
			strings.Replace(vap("p", "  validations:\n  - expression: 'true'\n"), "[CREATE, UPDATE]", "[CREATE, PATCH]", 1),
			`p.yaml:11: spec.matchConstraints.resourceRules[0].operations: "PATCH" is not an operation`,
		},
		"a policy with nothing to check is refused": {
			vap("p", "  failurePolicy: Fail\n"),
			"p.yaml:5: spec.validations: a policy needs validations or auditAnnotations",
		},
		"a binding of no policy of the directory is refused": {
			"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec:\n  policyName: nosuch\n  validationActions: [Deny]\n",
			`p.yaml:5: spec.policyName: binds "nosuch", which is no ValidatingAdmissionPolicy of the directory`,
		},
		"a binding without actions is refused": {
			vap("p", "  validations:\n  - expression: 'true'\n") + "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec:\n  policyName: p\n",
			"p.yaml:18: spec.validationActions: a binding needs validationActions",
		},
		"Deny and Warn together are refused": {
			vap("p", "  validations:\n  - expression: 'true'\n") + "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec:\n  policyName: p\n  validationActions: [Deny, Warn]\n",
			"p.yaml:20: spec.validationActions: Deny and Warn may not be used together",
		},
		"parameters a binding requires must be in the directory": {
			vap("p", "  paramKind: {apiVersion: v1, kind: ConfigMap}\n  validations:\n  - expression: 'true'\n") + "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec:\n  policyName: p\n  validationActions: [Deny]\n  paramRef: {name: limits, parameterNotFoundAction: Deny}\n",
			`p.yaml:22: spec.paramRef.name: no v1 ConfigMap named "limits" in the policy directory`,
		},
		"Kyverno's resource library needs a cluster": {
			kyvernoPolicy("k", "  validations:\n  - expression: \"resource.Get('v1', 'configmaps', 'edge', 'x').data.a == 'b'\"\n"),
			"p.yaml:13: spec.validations[0].expression: uses Kyverno's resource library (resource.Get, resource.List, resource.Post), which needs a cluster: not supported offline",
		},
		"Kyverno's http library needs the network": {
			kyvernoPolicy("k", "  variables:\n  - name: r\n    expression: \"http.Get('https://example.com')\"\n  validations:\n  - expression: 'variables.r.ok'\n"),
			"p.yaml:14: spec.variables[0].expression: uses Kyverno's http library (http.Get, http.Post), which needs the network: not supported offline",
		},
		"Kyverno's image data library needs a registry": {
			kyvernoPolicy("k", "  validations:\n  - expression: \"image.GetMetadata('nginx').config.user != ''\"\n"),
			"p.yaml:13: spec.validations[0].expression: uses Kyverno's image data library (image.GetMetadata), which needs an image registry",
		},
		"Kyverno's globalContext needs a cluster": {
			kyvernoPolicy("k", "  validations:\n  - expression: \"globalContext.Get('zones', '') != null\"\n"),
			"p.yaml:13: spec.validations[0].expression: uses Kyverno's globalContext library, which needs a cluster",
		},
		"Kyverno's pure libraries are not offered": {
			kyvernoPolicy("k", "  validations:\n  - expression: \"x509.decode(object.spec.cert).isCA == false\"\n"),
			"p.yaml:13: spec.validations[0].expression: uses Kyverno's x509 library, which is not supported offline",
		},
		"Kyverno's image function is not offered": {
			kyvernoPolicy("k", "  validations:\n  - expression: \"image('nginx:1').registry() == 'docker.io'\"\n"),
			"p.yaml:13: spec.validations[0].expression: uses Kyverno's image library (image())",
		},
		"Kyverno's JSON mode is refused": {
			kyvernoPolicy("k", "  evaluation: {mode: JSON}\n  validations:\n  - expression: 'true'\n"),
			"p.yaml:12: spec.evaluation.mode: mode JSON judges JSON documents, not admission requests: not supported offline",
		},
		"a misspelt Kyverno field is unknown at its line": {
			kyvernoPolicy("k", "  validationAction: [Audit]\n  validations:\n  - expression: 'true'\n"),
			"p.yaml:12: spec.validationAction: unknown field",
		},
		"a NamespacedValidatingPolicy needs its namespace": {
			strings.Replace(kyvernoPolicy("k", "  validations:\n  - expression: 'true'\n"), "kind: ValidatingPolicy", "kind: NamespacedValidatingPolicy", 1),
			"p.yaml:3: metadata.namespace: a NamespacedValidatingPolicy judges the requests of its namespace",
		},
		"two policies of one name are refused": {
			vap("p", "  validations:\n  - expression: 'true'\n") + "---\n" + kyvernoPolicy("p", "  validations:\n  - expression: 'true'\n"),
			`p.yaml:15: metadata.name: ValidatingPolicy "p" is also declared at p.yaml:1 (ValidatingAdmissionPolicy)`,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, problems := readAll(t, map[string]string{"p.yaml": c.file})
			var got []string
			for _, p := range problems {
				got = append(got, p.Error())
			}
			for _, g := range got {
				if strings.HasPrefix(g, c.want) || strings.Contains(g, c.want) {
					return
				}
			}
			t.Errorf("problems:\n  %s\nwant one starting %q", strings.Join(got, "\n  "), c.want)
		})
	}
}
