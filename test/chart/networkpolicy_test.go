package chart

import (
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The NetworkPolicy lets only the configured API server sources reach the
// admission port of the webhook Pods, and leaves the probe port open.
func TestNetworkPolicyAdmitsOnlyTheAPIServerToTheAdmissionPort(t *testing.T) {
	rel := render(t, `webhook: {networkPolicy: {enabled: true, apiServer: {cidrs: [10.0.0.10/32, "fd00::10/128"], peers: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {k8s-app: konnectivity-agent}}}]}}}`)
	// The bundled Redis has a NetworkPolicy of its own; this is the webhook's.
	np := get[networkingv1.NetworkPolicy](t, rel, "NetworkPolicy", webhookName)
	dep := webhookDeployment(t, rel)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Fatalf("the policy must select the webhook Pods %v, selector %v (%v)", dep.Spec.Template.Labels, np.Spec.PodSelector, err)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 2 {
		t.Fatalf("want two ingress rules (admission, probe), got %+v", np.Spec)
	}
	admission, probe := np.Spec.Ingress[0], np.Spec.Ingress[1]
	if len(admission.Ports) != 1 || *admission.Ports[0].Port != intstr.FromString("https") || *admission.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Fatalf("the first rule is for the admission port only: %+v", admission.Ports)
	}
	if len(admission.From) != 3 || admission.From[0].IPBlock.CIDR != "10.0.0.10/32" || admission.From[1].IPBlock.CIDR != "fd00::10/128" ||
		admission.From[2].PodSelector.MatchLabels["k8s-app"] != "konnectivity-agent" {
		t.Fatalf("the admission port admits the API server's sources only: %+v", admission.From)
	}
	if len(probe.Ports) != 1 || *probe.Ports[0].Port != intstr.FromString("probe") || probe.From != nil {
		t.Fatalf("the probe port stays open to the kubelet and Prometheus: %+v", probe)
	}
	for _, name := range []string{"https", "probe"} {
		found := false
		for _, p := range container(t, &dep.Spec.Template.Spec, "qn-webhook").Ports {
			found = found || p.Name == name
		}
		if !found {
			t.Errorf("the policy names port %q, which the webhook container does not declare", name)
		}
	}
}

func TestNetworkPolicyIsOffByDefaultAndNeedsASource(t *testing.T) {
	if np := render(t, "").Find("NetworkPolicy", webhookName); np != nil {
		t.Fatalf("the default install renders no NetworkPolicy for the webhook (its sources are cluster-specific): %v", np)
	}
	_, err := chartrender.Render("qn-admission", releaseNS, values(t, "webhook: {networkPolicy: {enabled: true}}"))
	if err == nil || !strings.Contains(err.Error(), "needs webhook.networkPolicy.apiServer.cidrs or .peers") {
		t.Fatalf("enabling it without a source must fail with a sentence, got %v", err)
	}
}
