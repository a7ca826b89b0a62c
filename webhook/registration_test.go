package webhook

import (
	"slices"
	"strings"
	"testing"
)

func TestParseAdditionalResource(t *testing.T) {
	for in, want := range map[string]AdditionalResource{
		"pods.v1":                         {Version: "v1", Resource: "pods", Operations: []string{"CREATE", "UPDATE"}},
		"deployments.v1.apps:CREATE":      {Group: "apps", Version: "v1", Resource: "deployments", Operations: []string{"CREATE"}},
		"cronjobs.v1.batch:CREATE,DELETE": {Group: "batch", Version: "v1", Resource: "cronjobs", Operations: []string{"CREATE", "DELETE"}},
		"widgets.v1beta2.example.com":     {Group: "example.com", Version: "v1beta2", Resource: "widgets", Operations: []string{"CREATE", "UPDATE"}},
	} {
		got, err := ParseAdditionalResource(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got.Group != want.Group || got.Version != want.Version || got.Resource != want.Resource || !slices.Equal(got.Operations, want.Operations) {
			t.Errorf("%s: got %+v, want %+v", in, got, want)
		}
		if again, _ := ParseAdditionalResource(got.String()); again.String() != got.String() {
			t.Errorf("%s: String %q does not parse back to itself", in, got.String())
		}
	}
	for in, want := range map[string]string{
		"*.v1":               "never a wildcard or a subresource",
		"pods/exec.v1":       "never a wildcard or a subresource",
		"pods":               `"" is not an API version`,
		"Pods.v1":            `"Pods" is not a resource name`,
		"pods.v1:CONNECT":    `operation "CONNECT" is not one of CREATE, UPDATE, DELETE`,
		"pods.v1:":           `operation "" is not one of`,
		"deployments.v1.Ap_": `"Ap_" is not an API group`,
	} {
		_, err := ParseAdditionalResource(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", in, err, want)
		}
	}
}

func TestAdditionalResourceCovers(t *testing.T) {
	pods, _ := ParseAdditionalResource("pods.v1")
	for name, tc := range map[string]struct {
		group, resource, sub, op string
		want                     bool
	}{
		"a Pod's CREATE":                          {"", "pods", "", "CREATE", true},
		"a Pod's UPDATE":                          {"", "pods", "", "UPDATE", true},
		"a Pod's DELETE, not asked for":           {"", "pods", "", "DELETE", false},
		"a subresource of a Pod (eviction)":       {"", "pods", "eviction", "CREATE", false},
		"the same resource name in another group": {"example.com", "pods", "", "CREATE", false},
		"another resource":                        {"", "configmaps", "", "CREATE", false},
	} {
		if got := pods.Covers(tc.group, tc.resource, tc.sub, tc.op); got != tc.want {
			t.Errorf("%s: covered %v, want %v", name, got, tc.want)
		}
	}
}

func TestRegisteredFor(t *testing.T) {
	base := RegisteredFor(nil)
	if base != "qn-webhook is registered for qn.dev QuantumNodes, and for HorizontalQNScalers' CREATE and UPDATE by its validating webhook only" {
		t.Errorf("without additional resources: %q", base)
	}
	more, err := ParseAdditionalResources([]string{"pods.v1", "deployments.v1.apps:CREATE,UPDATE,DELETE"})
	if err != nil {
		t.Fatal(err)
	}
	want := base + "; and, by --additional-resources (webhook.additionalResources), for CREATE and UPDATE of v1 pods; CREATE, UPDATE and DELETE of apps/v1 deployments by its validating webhook only"
	if got := RegisteredFor(more); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
