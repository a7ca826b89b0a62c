package policies

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"
)

// TestPolicyFilesAreNeverSilentlyIgnored: a document of a policy API that
// no dialect reads is a load error naming the file, the line and the kind;
// documents of other APIs (a test's resources) are left alone; a role
// naming a policy no file declares is an error at its line.
func TestPolicyFilesAreNeverSilentlyIgnored(t *testing.T) {
	saved := dialectReaders
	dialectReaders = nil
	t.Cleanup(func() { dialectReaders = saved })
	base := fstest.MapFS{
		"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n")},
		"p.rego":     {Data: []byte(portRego)},
		// A Kyverno test folder's resources and test file: not policies.
		"tests/resources.yaml":    {Data: []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: qn.dev/v1alpha1\nkind: QuantumNode\nmetadata: {name: b}\n")},
		"tests/kyverno-test.yaml": {Data: []byte("apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\n")},
	}
	if _, err := Load(context.Background(), base, LoadOptions{}); err != nil {
		t.Fatalf("a directory with non-policy YAML documents: %v", err)
	}
	withPolicy := fstest.MapFS{"policies/require.yaml": {Data: []byte("# a Kyverno policy\n---\napiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: require-team}\nspec: {rules: []}\n")}}
	for k, v := range base {
		withPolicy[k] = v
	}
	_, err := Load(context.Background(), withPolicy, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "policies/require.yaml:3: kind: kyverno.io/v1 ClusterPolicy is a policy this server cannot judge") {
		t.Fatalf("a ClusterPolicy no dialect reads: %v", err)
	}
	// A role listing the refused policy hears of its file, not of a
	// policy that does not exist; a webhook configuration kept beside the
	// policies is no policy.
	withPolicy["roles.yaml"] = &fstest.MapFile{Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n    policies: [require-team]\n")}
	withPolicy["webhook.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: w}\n")}
	_, err = Load(context.Background(), withPolicy, LoadOptions{})
	if err == nil || strings.Contains(err.Error(), "is not a policy of the directory") || strings.Contains(err.Error(), "webhook.yaml") {
		t.Fatalf("a role listing a refused policy: %v", err)
	}
	withPolicy["roles.yaml"] = &fstest.MapFile{Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n    policies: [require-team]\n")}
	delete(withPolicy, "policies/require.yaml")
	_, err = Load(context.Background(), withPolicy, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), `roles.yaml:6: roles.r.policies: "require-team" is not a policy of the directory (there are none)`) {
		t.Fatalf("a role naming a missing policy: %v", err)
	}
}

// qnClusterPolicy is a Kyverno ClusterPolicy for QuantumNodes, as a user
// would copy it from a Kyverno cluster.
const qnClusterPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: qn-require-zone
spec:
  validationFailureAction: Enforce
  background: true
  rules:
  - name: zone-label
    match:
      any:
      - resources:
          kinds: [qn.dev/v1alpha1/QuantumNode]
          operations: [CREATE, UPDATE]
    validate:
      message: "QuantumNode {{ request.object.metadata.name }} needs a zone label"
      pattern:
        metadata:
          labels:
            zone: "?*"
  - name: team-warning
    match:
      any:
      - resources: {kinds: [QuantumNode]}
    validate:
      failureAction: Audit
      message: QuantumNodes should name their team
      pattern: {metadata: {labels: {team: "?*"}}}
`

// TestAClusterPolicyJudgesAtAdmissionAndInTheAudit: a Kyverno
// ClusterPolicy listed under a role's policies denies at admission (and
// its Audit rule warns), and the audit reports each rule by name.
func TestAClusterPolicyJudgesAtAdmissionAndInTheAudit(t *testing.T) {
	fsys := fstest.MapFS{
		"roles.yaml":              {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE, UPDATE]\n    policies: [qn-require-zone]\n")},
		"kyverno/qn-require.yaml": {Data: []byte(qnClusterPolicy)},
	}
	set, err := Load(context.Background(), fsys, LoadOptions{})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	e := NewEngine(set, EngineOptions{})
	d := e.Validate(context.Background(), qnInput("CREATE", nodeWith(`{"priority":"low"}`, `[{"name":"a","port":8080}]`), ""))
	wantDeny := `denied by qn-admission (role "r"): validation error: QuantumNode edge-1 needs a zone label. rule zone-label failed at path /metadata/labels/zone/ (ClusterPolicy qn-require-zone rule zone-label)`
	if d.Allowed || d.Code != 403 || d.Message != wantDeny {
		t.Fatalf("decision allowed=%v code=%d message=%q\nwant 403 %q", d.Allowed, d.Code, d.Message, wantDeny)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "QuantumNodes should name their team") {
		t.Errorf("warnings %q: the Audit rule warns", d.Warnings)
	}
	ok := e.Validate(context.Background(), qnInput("CREATE", nodeWith(`{"zone":"a","team":"x"}`, `[{"name":"a","port":8080}]`), ""))
	if !ok.Allowed || len(ok.Warnings) != 0 {
		t.Errorf("a node with both labels: allowed=%v warnings=%q", ok.Allowed, ok.Warnings)
	}

	audit := e.Audit(context.Background(), storedNode("edge", nil, map[string]any{"priority": "low"}, nil))
	got := verdicts(audit)
	if strings.Join(got, " ") != "qn-require-zone.team-warning=warn qn-require-zone.zone-label=fail" || audit.Compliant() {
		t.Errorf("audit %q compliant=%v, want zone-label failed and team-warning warned", got, audit.Compliant())
	}
}
