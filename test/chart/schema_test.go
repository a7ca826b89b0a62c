package chart

import (
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// A wrong value fails the install before anything reaches the cluster, and
// the message names the value and what it should be.
func TestBadValuesAreRefusedWithAClearMessage(t *testing.T) {
	for name, tc := range map[string]struct {
		values string
		want   []string // every part must be in the error
	}{
		// values.schema.json
		"a timeout above the API server's 10 second cap": {"webhook: {timeoutSeconds: 30}", []string{"/webhook/timeoutSeconds", "maximum: got 30, want 10"}},
		"a timeout of zero":                         {"webhook: {timeoutSeconds: 0}", []string{"/webhook/timeoutSeconds", "minimum: got 0, want 1"}},
		"a timeout given as a string":               {"webhook: {timeoutSeconds: '5'}", []string{"/webhook/timeoutSeconds", "got string, want integer"}},
		"a failurePolicy in the wrong case":         {"webhook: {failurePolicy: fail}", []string{"/webhook/failurePolicy", "'Fail', 'Ignore'"}},
		"a reinvocationPolicy that does not exist":  {"webhook: {reinvocationPolicy: Always}", []string{"/webhook/reinvocationPolicy", "'Never', 'IfNeeded'"}},
		"no replicas":                               {"webhook: {replicas: 0}", []string{"/webhook/replicas", "minimum: got 0, want 1"}},
		"a misspelled key":                          {"webhook: {replica: 3}", []string{"/webhook", "additional properties 'replica' not allowed"}},
		"a misspelled top-level key":                {"webhooks: {replicas: 3}", []string{"additional properties 'webhooks' not allowed"}},
		"an operation the webhooks must not see":    {"webhook: {validatingOperations: [CREATE, CONNECT]}", []string{"/webhook/validatingOperations/1", "'CREATE', 'UPDATE', 'DELETE'"}},
		"no operation at all":                       {"webhook: {mutatingOperations: []}", []string{"/webhook/mutatingOperations", "minItems"}},
		"DELETE on the mutating webhook":            {"webhook: {mutatingOperations: [DELETE]}", []string{"/webhook/mutatingOperations/0", "'CREATE', 'UPDATE'"}},
		"a namespace name that cannot exist":        {"webhook: {namespaceSelector: {excludeNamespaces: [Kube_System]}}", []string{"/webhook/namespaceSelector/excludeNamespaces/0", "does not match pattern"}},
		"a policy deadline in minutes":              {"webhook: {policyEvalTimeout: 1m}", []string{"/webhook/policyEvalTimeout", "does not match pattern"}},
		"a privileged container port":               {"webhook: {ports: {https: 443}}", []string{"/webhook/ports/https", "minimum: got 443"}},
		"an anti-affinity mode that does not exist": {"webhook: {podAntiAffinity: strict}", []string{"/webhook/podAntiAffinity", "'soft', 'hard', 'none'"}},
		"a certificate mode that does not exist":    {"certificates: {mode: vault}", []string{"/certificates/mode", "'certManager', 'secret'"}},
		"own certificates without a Secret or caBundle": {"certificates: {mode: secret}", []string{
			"/certificates/secret/name", "/certificates/secret/caBundle", "minLength: got 0, want 1"}},
		"a caBundle that is not base64":                   {"certificates: {mode: secret, secret: {name: s, caBundle: '-----BEGIN'}}", []string{"/certificates/secret/caBundle", "does not match pattern"}},
		"a certificate duration in days":                  {"certificates: {certManager: {serving: {duration: 90d}}}", []string{"/certificates/certManager/serving/duration", "does not match pattern"}},
		"an issuerRef without a name":                     {"certificates: {certManager: {issuerRef: {kind: ClusterIssuer}}}", []string{"/certificates/certManager/issuerRef", "missing property 'name'"}},
		"an issuer kind that does not exist":              {"certificates: {certManager: {issuerRef: {name: x, kind: Vault}}}", []string{"/certificates/certManager/issuerRef/kind", "'Issuer', 'ClusterIssuer'"}},
		"a policy source that does not exist":             {"policies: {source: s3}", []string{"/policies/source", "'bundled', 'configMap', 'gitSync'"}},
		"a shadow ConfigMap without its name":             {"policies: {shadow: {source: configMap}}", []string{"/policies/shadow/configMapName", "minLength: got 0, want 1"}},
		"a shadow from Git without the served set in Git": {"policies: {shadow: {source: gitSync, gitSync: {ref: candidate}}}", []string{"/policies/source", "value must be 'gitSync'"}},
		"a shadow CPU share above one CPU":                {"policies: {shadow: {cpu: 2}}", []string{"/policies/shadow/cpu", "maximum"}},
		"git-sync without a repository":                   {"policies: {source: gitSync}", []string{"/policies/gitSync/repo", "minLength: got 0, want 1"}},
		"git-sync credentials without their Secret":       {"policies: {source: gitSync, gitSync: {repo: r, auth: {type: ssh}}}", []string{"/policies/gitSync/auth/secretName", "minLength: got 0, want 1"}},
		"a git-sync path that climbs out of the checkout": {"policies: {source: gitSync, gitSync: {repo: r, path: ../etc}}", []string{"/policies/gitSync/path", "'not' failed"}},
		"a policy file name with a slash":                 {"policies: {configMap: {files: {a/b.rego: x}}}", []string{"invalid propertyName 'a/b.rego'"}},
		"a policy file that is not text":                  {"policies: {configMap: {files: {roles.yaml: {defaultRole: x}}}}", []string{"/policies/configMap/files/roles.yaml", "got object, want string"}},
		"an extra flag that is not a flag":                {"webhook: {extraArgs: [allow-network-builtins]}", []string{"/webhook/extraArgs/0", "does not match pattern"}},
		"a log level that does not exist":                 {"controller: {logLevel: verbose}", []string{"/controller/logLevel", "'debug', 'info', 'warn', 'error'"}},
		"an image digest that is a tag":                   {"webhook: {image: {digest: latest}}", []string{"/webhook/image/digest", "does not match pattern"}},
		"an image digest without its algorithm":           {"controller: {image: {digest: " + strings.Repeat("a", 64) + "}}", []string{"/controller/image/digest", "does not match pattern"}},
		"a git-sync image without a tag":                  {"policies: {gitSync: {image: {tag: ''}}}", []string{"/policies/gitSync/image/tag", "minLength: got 0, want 1"}},

		// Combinations the schema cannot express fail in the templates.
		"a policy deadline as long as the webhook timeout": {"webhook: {timeoutSeconds: 2, policyEvalTimeout: 2000ms}", []string{
			"webhook.policyEvalTimeout (2000ms) must be shorter than webhook.timeoutSeconds (2s)"}},
		"a disruption budget that no drain could satisfy": {"webhook: {replicas: 2, podDisruptionBudget: {minAvailable: 2}}", []string{
			"webhook.podDisruptionBudget.minAvailable (2) must be below webhook.replicas (2)"}},
		"a serving certificate renewed after it expired": {"certificates: {certManager: {serving: {duration: 24h, renewBefore: 48h}}}", []string{
			"certificates.certManager.serving.renewBefore (48h) must be shorter than its duration (24h)"}},
		"a CA renewed the moment it is issued": {"certificates: {certManager: {ca: {duration: 8760h, renewBefore: 8760h}}}", []string{
			"certificates.certManager.ca.renewBefore (8760h) must be shorter than its duration (8760h)"}},
		"a ConfigMap policy set without a role table": {"policies: {source: configMap, configMap: {includeBundled: false, files: {a.rego: 'package a'}}}", []string{
			"policies.configMap.files needs a roles.yaml"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := chartrender.Render(releaseName, releaseNS, values(t, tc.values))
			if err == nil {
				t.Fatalf("values %s were accepted", tc.values)
			}
			for _, part := range tc.want {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error lacks %q:\n%v", part, err)
				}
			}
		})
	}
}

// The values file the chart ships is valid against its own schema, and the
// schema holds no key values.yaml lacks (which would be a value nobody can
// see the default of).
func TestValuesYAMLAndSchemaAgree(t *testing.T) {
	ch, err := chartrender.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := chartutil.ValidateAgainstSchema(ch, ch.Values); err != nil {
		t.Fatalf("values.yaml fails values.schema.json: %v", err)
	}
	schema, err := chartutil.ReadValues(ch.Schema)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(path string, schema map[string]any, vals map[string]any)
	walk = func(path string, schema map[string]any, vals map[string]any) {
		props, _ := schema["properties"].(map[string]any)
		for key, sub := range props {
			if path == "" && key == "global" {
				continue
			}
			v, ok := vals[key]
			if !ok {
				t.Errorf("values.schema.json has %s%s, values.yaml does not", path, key)
				continue
			}
			subSchema, _ := sub.(map[string]any)
			if d, _ := subSchema["description"].(string); d == "" {
				t.Errorf("%s%s has no description in values.schema.json", path, key)
			}
			// An empty map is an optional block (issuerRef): nothing to show.
			if m, ok := v.(map[string]any); ok && len(m) > 0 && subSchema["properties"] != nil {
				walk(path+key+".", subSchema, m)
			}
		}
	}
	walk("", schema, ch.Values)
}

// The chart states the Kubernetes versions it supports: native sidecars
// (git-sync) need 1.29 and the preStop sleep action 1.30.
func TestKubeVersionConstraint(t *testing.T) {
	ch, err := chartrender.Load()
	if err != nil {
		t.Fatal(err)
	}
	for version, want := range map[string]bool{chartrender.KubeVersion: true, "v1.30.0": true, "v1.33.1-eks-1": true, "v1.29.9": false} {
		if got := chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, version); got != want {
			t.Errorf("kubeVersion %q accepts %s: %v, want %v", ch.Metadata.KubeVersion, version, got, want)
		}
	}
}
