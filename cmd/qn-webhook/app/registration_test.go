package app

import (
	"strings"
	"testing"
)

// --additional-resources (the chart's webhook.additionalResources) says in
// /readyz?verbose what the API server sends besides QuantumNodes; a
// malformed one stops the start with a sentence naming it.
func TestAdditionalResourcesAreSaidInReadiness(t *testing.T) {
	s := start(t, t.TempDir(), "--additional-resources=pods.v1", "--additional-resources=deployments.v1.apps:CREATE")
	want := "[+]registration ok: qn-webhook is registered for qn.dev QuantumNodes, and for HorizontalQNScalers' CREATE and UPDATE by its validating webhook only; " +
		"and, by --additional-resources (webhook.additionalResources), for CREATE and UPDATE of v1 pods; CREATE of apps/v1 deployments by its validating webhook only"
	if code, body := s.probe(t, "/readyz?verbose"); code != 200 || !strings.Contains(body, want) {
		t.Errorf("GET /readyz?verbose = %d\n%s\nwant it to contain %q", code, body, want)
	}

	for flag, want := range map[string]string{
		"--additional-resources=pods/exec.v1":     "--additional-resources: additional resource \"pods/exec.v1\": name one resource (pods.v1), never a wildcard or a subresource",
		"--additional-resources=pods.v1:CONNECT":  `operation "CONNECT" is not one of CREATE, UPDATE, DELETE`,
		"--additional-resources=deployments.apps": `"apps" is not an API version`,
	} {
		o := options(t, append(localArgs(t.TempDir()), flag)...)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", flag, err, want)
		}
	}
}
