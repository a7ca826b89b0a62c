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
	withPolicy["roles.yaml"] = &fstest.MapFile{Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    packages: [p]\n    policies: [require-team]\n")}
	delete(withPolicy, "policies/require.yaml")
	_, err = Load(context.Background(), withPolicy, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), `roles.yaml:6: roles.r.policies: "require-team" is not a policy of the directory (there are none)`) {
		t.Fatalf("a role naming a missing policy: %v", err)
	}
}
