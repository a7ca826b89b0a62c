package chart

import (
	"encoding/json"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The release every test renders, unless it says otherwise.
const (
	releaseName = "qn"
	releaseNS   = "qn-system"
	fullname    = "qn-qn-admission"
	webhookName = fullname + "-webhook"
)

// values parses a YAML snippet of values; "" is no override.
func values(t *testing.T, snippet string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(snippet), &vals); err != nil {
		t.Fatalf("values %q: %v", snippet, err)
	}
	return vals
}

// render renders the test release with a values snippet and fails the
// test if the chart refuses it.
func render(t *testing.T, snippet string) *chartrender.Release {
	t.Helper()
	rel, err := chartrender.Render(releaseName, releaseNS, values(t, snippet))
	if err != nil {
		t.Fatalf("render with values %q: %v", snippet, err)
	}
	return rel
}

// decodeStrict turns an unstructured object into a typed one; a field the
// type does not know is an error, so a misspelled key in a template fails
// here.
func decodeStrict[T any](t *testing.T, obj *unstructured.Unstructured) *T {
	t.Helper()
	data, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	return out
}

// get returns the typed object of kind named name, failing if absent.
func get[T any](t *testing.T, rel *chartrender.Release, kind, name string) *T {
	t.Helper()
	obj := rel.Find(kind, name)
	if obj == nil {
		t.Fatalf("no %s %q rendered; kinds: %v", kind, name, rel.Kinds())
	}
	return decodeStrict[T](t, obj)
}

func webhookDeployment(t *testing.T, rel *chartrender.Release) *appsv1.Deployment {
	t.Helper()
	return get[appsv1.Deployment](t, rel, "Deployment", webhookName)
}

// only returns the one object of a kind, whatever its name.
func only[T any](t *testing.T, rel *chartrender.Release, kind string) *T {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, obj := range rel.Objects {
		if obj.GetKind() == kind {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s, got %d", kind, len(found))
	}
	return decodeStrict[T](t, found[0])
}

func validating(t *testing.T, rel *chartrender.Release) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	return only[admissionregistrationv1.ValidatingWebhookConfiguration](t, rel, "ValidatingWebhookConfiguration")
}

func mutating(t *testing.T, rel *chartrender.Release) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	return only[admissionregistrationv1.MutatingWebhookConfiguration](t, rel, "MutatingWebhookConfiguration")
}

// webhookView is what the fail-safe checks read from either kind of
// webhook.
type webhookView struct {
	Config            string
	Name              string
	ClientConfig      admissionregistrationv1.WebhookClientConfig
	Rules             []admissionregistrationv1.RuleWithOperations
	FailurePolicy     *admissionregistrationv1.FailurePolicyType
	MatchPolicy       *admissionregistrationv1.MatchPolicyType
	NamespaceSelector *metav1.LabelSelector
	ObjectSelector    *metav1.LabelSelector
	SideEffects       *admissionregistrationv1.SideEffectClass
	TimeoutSeconds    *int32
	ReviewVersions    []string
	Annotations       map[string]string
}

// scalerWebhookName is the validating webhook of HorizontalQNScalers,
// which parses their PromQL (scaler_test.go holds its properties).
const scalerWebhookName = "validate.horizontalqnscalers.qn.dev"

// webhooks lists the QuantumNode webhooks of both configurations (not the
// scalers' nor webhook.additionalResources' entries: additional_test.go).
func webhooks(t *testing.T, rel *chartrender.Release) []webhookView {
	t.Helper()
	v, m := validating(t, rel), mutating(t, rel)
	var out []webhookView
	for _, w := range v.Webhooks {
		if w.Name == scalerWebhookName || strings.HasPrefix(w.Name, "validate-additional") {
			continue
		}
		out = append(out, webhookView{"ValidatingWebhookConfiguration", w.Name, w.ClientConfig, w.Rules, w.FailurePolicy,
			w.MatchPolicy, w.NamespaceSelector, w.ObjectSelector, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, v.Annotations})
	}
	for _, w := range m.Webhooks {
		out = append(out, webhookView{"MutatingWebhookConfiguration", w.Name, w.ClientConfig, w.Rules, w.FailurePolicy,
			w.MatchPolicy, w.NamespaceSelector, w.ObjectSelector, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, m.Annotations})
	}
	if len(out) != 2 {
		t.Fatalf("want one validating and one mutating webhook, got %d", len(out))
	}
	return out
}

// container returns the named container or init container of a Pod spec.
func container(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == name {
			return &spec.InitContainers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// flag returns the value of --name=value in args, and whether it is there.
func flag(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name {
			return "", true
		}
	}
	return "", false
}

// volume returns the named volume of a Pod spec.
func volume(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Volume {
	t.Helper()
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	t.Fatalf("no volume %q", name)
	return nil
}

// mountOf returns the mount of volume name in c, or nil.
func mountOf(c *corev1.Container, name string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == name {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}
