package chart

import (
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scalerWebhook returns the HorizontalQNScaler webhook, or nil.
func scalerWebhook(t *testing.T, rel *chartrender.Release) *admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	for _, w := range validating(t, rel).Webhooks {
		if w.Name == scalerWebhookName {
			return &w
		}
	}
	return nil
}

// The PromQL check of HorizontalQNScalers covers their writes only, fails
// open (the CRD's rules hold without it; a scaler stays pausable while
// qn-webhook is down), and keeps every other fail-safe setting.
func TestTheScalerWebhookIsNarrowAndFailsOpen(t *testing.T) {
	rel := render(t, "")
	w := scalerWebhook(t, rel)
	if w == nil {
		t.Fatalf("no %s webhook by default", scalerWebhookName)
	}
	if len(w.Rules) != 1 {
		t.Fatalf("rules %+v, want one", w.Rules)
	}
	r := w.Rules[0]
	if !slices.Equal(r.APIGroups, []string{"qn.dev"}) || !slices.Equal(r.Resources, []string{"horizontalqnscalers"}) ||
		!slices.Equal(r.APIVersions, []string{"v1alpha1"}) || !slices.Equal(r.Operations, []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}) {
		t.Errorf("rule %+v, want CREATE and UPDATE of qn.dev/v1alpha1 horizontalqnscalers only", r)
	}
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("failurePolicy %v, want Ignore", deref(w.FailurePolicy))
	}
	if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone || w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 ||
		w.ClientConfig.Service == nil || w.ClientConfig.Service.Path == nil || *w.ClientConfig.Service.Path != "/validate" {
		t.Errorf("webhook %+v", w)
	}
	sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Matches(namespaceLabels("kube-system")) || sel.Matches(namespaceLabels(releaseNS)) || !sel.Matches(namespaceLabels("team-a")) {
		t.Errorf("namespaceSelector %s", sel)
	}

	off := render(t, "controller:\n  scaler:\n    enabled: false\n")
	if scalerWebhook(t, off) != nil {
		t.Error("the scaler webhook is rendered with controller.scaler.enabled=false")
	}
}

// qn-controller's scaler flags come from the values, and its RBAC grants
// */scale in the listed groups only.
func TestScalerValues(t *testing.T) {
	rel := render(t, `
controller:
  scaler:
    prometheusURL: http://prometheus-operated.monitoring:9090
    workers: 8
    scaleGroups: [apps, argoproj.io]
    readSecrets: false
`)
	dep := get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller")
	args := strings.Join(container(t, &dep.Spec.Template.Spec, "qn-controller").Args, " ")
	for _, want := range []string{"--scalers=true", "--prometheus-url=http://prometheus-operated.monitoring:9090", "--scaler-workers=8", "--prometheus-max-inflight=8"} {
		if !strings.Contains(args, want) {
			t.Errorf("qn-controller's args lack %s: %s", want, args)
		}
	}
	grants := ruleGrants(only[rbacv1.ClusterRole](t, rel, "ClusterRole").Rules)
	for _, want := range []string{"apps/*/scale:update", "argoproj.io/*/scale:get", "argoproj.io/*/scale:update", "qn.dev/horizontalqnscalers/status:patch"} {
		if !slices.Contains(grants, want) {
			t.Errorf("the ClusterRole lacks %s", want)
		}
	}
	for _, g := range grants {
		if strings.HasPrefix(g, "/secrets") {
			t.Errorf("readSecrets=false still grants %s", g)
		}
		if strings.Contains(g, "/scale:") && !strings.HasPrefix(g, "apps/") && !strings.HasPrefix(g, "argoproj.io/") {
			t.Errorf("scale granted outside scaleGroups: %s", g)
		}
	}

	off := render(t, "controller:\n  scaler:\n    enabled: false\n")
	dep = get[appsv1.Deployment](t, off, "Deployment", fullname+"-controller")
	if args := strings.Join(container(t, &dep.Spec.Template.Spec, "qn-controller").Args, " "); !strings.Contains(args, "--scalers=false") || strings.Contains(args, "--prometheus") {
		t.Errorf("scalers off: args %s", args)
	}
	for _, g := range ruleGrants(only[rbacv1.ClusterRole](t, off, "ClusterRole").Rules) {
		if strings.Contains(g, "scale") {
			t.Errorf("scalers off still grants %s", g)
		}
	}
}
