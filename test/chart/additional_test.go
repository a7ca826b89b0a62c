package chart

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/cmd/qn-webhook/app"
	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"github.com/quantumnode/qn-admission/webhook"
)

// Names of the webhook entries of webhook.additionalResources.
const (
	additionalWebhookName     = "validate-additional.qn.dev"
	additionalFailWebhookName = "validate-additional-fail.qn.dev"
)

// additionalValues register the validating webhook for Pods (Ignore, the
// default) and for apps/v1 Deployments and StatefulSets, CREATE only, with
// failurePolicy Fail set explicitly.
const additionalValues = `
webhook:
  additionalResources:
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [pods]
    - apiGroups: [apps]
      apiVersions: [v1]
      resources: [deployments, statefulsets]
      operations: [CREATE]
      failurePolicy: Fail
`

// validatingWebhook returns the validating webhook entry of that name, or
// nil.
func validatingWebhook(t *testing.T, rel *chartrender.Release, name string) *admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	for _, w := range validating(t, rel).Webhooks {
		if w.Name == name {
			return &w
		}
	}
	return nil
}

// By default nothing changes for an existing install: the webhooks see
// QuantumNodes and HorizontalQNScalers only, and qn-webhook is told of
// nothing more.
func TestNoAdditionalResourcesByDefault(t *testing.T) {
	rel := render(t, "")
	var names []string
	for _, w := range validating(t, rel).Webhooks {
		names = append(names, w.Name)
	}
	if want := []string{"validate.quantumnodes.qn.dev", scalerWebhookName}; !slices.Equal(names, want) {
		t.Errorf("validating webhooks %v, want %v", names, want)
	}
	c := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
	if v, ok := flag(c.Args, "additional-resources"); ok {
		t.Errorf("--additional-resources=%s with the default values", v)
	}
	if strings.Contains(rel.Notes, "additionalResources") {
		t.Errorf("NOTES.txt speaks of additional resources with the default values:\n%s", rel.Notes)
	}
}

// Each failurePolicy gets an entry of its own, Ignore unless an entry says
// Fail; each keeps every fail-safe setting of the QuantumNode entry (its
// namespace exclusions, sideEffects None, matchPolicy Equivalent, the
// timeout, the Service's /validate) and matches namespaced objects only;
// the mutating configuration does not change; and qn-webhook is told
// exactly the rules the API server holds.
func TestAdditionalResourcesRenderAsTheirOwnWebhookEntries(t *testing.T) {
	rel := render(t, additionalValues+"  timeoutSeconds: 3\n  namespaceSelector: {excludeNamespaces: [kube-system, team-z]}\n")
	qnEntry := validatingWebhook(t, rel, "validate.quantumnodes.qn.dev")
	ignore, fail := validatingWebhook(t, rel, additionalWebhookName), validatingWebhook(t, rel, additionalFailWebhookName)
	if qnEntry == nil || ignore == nil || fail == nil {
		t.Fatalf("want the QuantumNode entry, %s and %s; got %+v", additionalWebhookName, additionalFailWebhookName, validating(t, rel).Webhooks)
	}
	type rule struct {
		groups, versions, resources []string
		ops                         []admissionregistrationv1.OperationType
	}
	for _, tc := range []struct {
		w      *admissionregistrationv1.ValidatingWebhook
		policy admissionregistrationv1.FailurePolicyType
		rules  []rule
	}{
		{ignore, admissionregistrationv1.Ignore, []rule{{[]string{""}, []string{"v1"}, []string{"pods"}, []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}}}},
		{fail, admissionregistrationv1.Fail, []rule{{[]string{"apps"}, []string{"v1"}, []string{"deployments", "statefulsets"}, []admissionregistrationv1.OperationType{"CREATE"}}}},
	} {
		w := tc.w
		if w.FailurePolicy == nil || *w.FailurePolicy != tc.policy {
			t.Errorf("%s: failurePolicy %v, want %s", w.Name, deref(w.FailurePolicy), tc.policy)
		}
		if len(w.Rules) != len(tc.rules) {
			t.Fatalf("%s: rules %+v, want %d", w.Name, w.Rules, len(tc.rules))
		}
		for i, r := range w.Rules {
			want := tc.rules[i]
			if !slices.Equal(r.APIGroups, want.groups) || !slices.Equal(r.APIVersions, want.versions) || !slices.Equal(r.Resources, want.resources) || !slices.Equal(r.Operations, want.ops) {
				t.Errorf("%s: rule %+v, want %+v", w.Name, r, want)
			}
			if r.Scope == nil || *r.Scope != admissionregistrationv1.NamespacedScope {
				t.Errorf("%s: scope %v, want Namespaced: a cluster-scoped object would escape the namespace exclusions", w.Name, deref(r.Scope))
			}
		}
		if !apiequality.Semantic.DeepEqual(w.NamespaceSelector, qnEntry.NamespaceSelector) {
			t.Errorf("%s: namespaceSelector %+v, want the QuantumNode entry's %+v", w.Name, w.NamespaceSelector, qnEntry.NamespaceSelector)
		}
		sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		for ns, sent := range map[string]bool{"kube-system": false, releaseNS: false, "team-z": false, "team-a": true, "team-a,qn.dev/admission=disabled": true} {
			if got := sel.Matches(namespaceLabels(ns)); got != sent {
				t.Errorf("%s: namespace %s sent=%v, want %v", w.Name, ns, got, sent)
			}
		}
		if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
			t.Errorf("%s: sideEffects %v, want None", w.Name, deref(w.SideEffects))
		}
		if w.MatchPolicy == nil || *w.MatchPolicy != admissionregistrationv1.Equivalent {
			t.Errorf("%s: matchPolicy %v, want Equivalent", w.Name, deref(w.MatchPolicy))
		}
		if w.TimeoutSeconds == nil || *w.TimeoutSeconds != 3 {
			t.Errorf("%s: timeoutSeconds %v, want webhook.timeoutSeconds (3)", w.Name, deref(w.TimeoutSeconds))
		}
		if !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
			t.Errorf("%s: admissionReviewVersions %v", w.Name, w.AdmissionReviewVersions)
		}
		if !apiequality.Semantic.DeepEqual(w.ClientConfig, qnEntry.ClientConfig) {
			t.Errorf("%s: clientConfig %+v, want the QuantumNode entry's (/validate of the Service)", w.Name, w.ClientConfig)
		}
	}
	for _, w := range mutating(t, rel).Webhooks {
		for _, r := range w.Rules {
			if !slices.Equal(r.APIGroups, []string{"qn.dev"}) {
				t.Errorf("mutating %s: rule %+v: the additional resources are for validation only", w.Name, r.Rule)
			}
		}
	}

	for _, want := range []string{
		"pods (core v1): CREATE, UPDATE, failurePolicy Ignore: while no replica answers, these writes are admitted unjudged",
		"deployments, statefulsets (apps v1): CREATE, failurePolicy Fail: while no replica answers, these writes are refused",
	} {
		if !strings.Contains(rel.Notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, rel.Notes)
		}
	}

	// qn-webhook's flags parse, and say what the rules say, no more.
	c := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
	o := app.NewOptions()
	fs := pflag.NewFlagSet("qn-webhook", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatal(err)
	}
	told, err := webhook.ParseAdditionalResources(o.AdditionalResources)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, r := range told {
		got = append(got, r.String())
	}
	for _, w := range []*admissionregistrationv1.ValidatingWebhook{ignore, fail} {
		for _, r := range w.Rules {
			var ops []string
			for _, op := range r.Operations {
				ops = append(ops, string(op))
			}
			for _, g := range r.APIGroups {
				for _, v := range r.APIVersions {
					for _, res := range r.Resources {
						want = append(want, webhook.AdditionalResource{Group: g, Version: v, Resource: res, Operations: ops}.String())
					}
				}
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("qn-webhook is told %v, the API server holds %v", got, want)
	}
	if !strings.Contains(webhook.RegisteredFor(told), "CREATE and UPDATE of v1 pods; CREATE of apps/v1 deployments; CREATE of apps/v1 statefulsets") {
		t.Errorf("RegisteredFor: %s", webhook.RegisteredFor(told))
	}
}

// Entries that could lock a cluster out, or keep it from repairing
// itself, are refused at install with a message that says why.
func TestDangerousAdditionalResourcesAreRefused(t *testing.T) {
	entry := func(groups, resources string) string {
		return fmt.Sprintf("webhook: {additionalResources: [{apiGroups: %s, apiVersions: [v1], resources: %s}]}", groups, resources)
	}
	const res, grp = "/webhook/additionalResources/0/resources/0", "/webhook/additionalResources/0/apiGroups/0"
	for name, tc := range map[string]struct {
		values string
		want   []string
	}{
		"a wildcard resource":               {entry(`[""]`, `["*"]`), []string{res, "anything but a wildcard (*): it also matches the control plane's own resources", `docs/install.md, "Registering more resources"`}},
		"a wildcard group":                  {entry(`["*"]`, `[pods]`), []string{grp, "anything but a wildcard (*): it also matches admissionregistration.k8s.io"}},
		"a wildcard version":                {`webhook: {additionalResources: [{apiGroups: [""], apiVersions: ["*"], resources: [pods]}]}`, []string{"/webhook/additionalResources/0/apiVersions/0", "anything but a wildcard (*): name the version"}},
		"pods/exec":                         {entry(`[""]`, `[pods/exec]`), []string{res, "anything but a subresource (pods/exec, pods/eviction"}},
		"pods/eviction":                     {entry(`[""]`, `[pods/eviction]`), []string{res, "anything but a subresource"}},
		"deployments/scale":                 {entry(`[apps]`, `[deployments/scale]`), []string{res, "anything but a subresource"}},
		"namespaces":                        {entry(`[""]`, `[namespaces]`), []string{res, "anything but namespaces: they are cluster-scoped"}},
		"nodes":                             {entry(`[""]`, `[nodes]`), []string{res, "anything but nodes: kubelets register and report through them"}},
		"events":                            {entry(`[""]`, `[events]`), []string{res, "anything but events"}},
		"events.k8s.io":                     {entry(`[events.k8s.io]`, `[events]`), []string{grp, "anything but events.k8s.io"}},
		"leases":                            {entry(`[coordination.k8s.io]`, `[leases]`), []string{res, "anything but leases: node heartbeats", grp, "anything but coordination.k8s.io"}},
		"endpoints":                         {entry(`[""]`, `[endpoints]`), []string{res, "anything but endpoints and endpointslices: Services are routed through them, qn-webhook's own among them"}},
		"endpointslices":                    {entry(`[discovery.k8s.io]`, `[endpointslices]`), []string{res, grp, "anything but discovery.k8s.io"}},
		"tokenreviews":                      {entry(`[authentication.k8s.io]`, `[tokenreviews]`), []string{res, "anything but tokenreviews and subjectaccessreviews", grp, "anything but authentication.k8s.io"}},
		"subjectaccessreviews":              {entry(`[authorization.k8s.io]`, `[subjectaccessreviews]`), []string{res, grp, "anything but authorization.k8s.io"}},
		"validatingwebhookconfigurations":   {entry(`[admissionregistration.k8s.io]`, `[validatingwebhookconfigurations]`), []string{res, grp, "qn-webhook must never stand in the way of repairing or removing its own webhook configuration"}},
		"validatingadmissionpolicies":       {entry(`[admissionregistration.k8s.io]`, `[validatingadmissionpolicies]`), []string{res, "anything but admission configurations and policies"}},
		"customresourcedefinitions":         {entry(`[apiextensions.k8s.io]`, `[customresourcedefinitions]`), []string{res, grp, "CRDs, qn-webhook's own among them, must stay repairable"}},
		"RBAC":                              {entry(`[rbac.authorization.k8s.io]`, `[rolebindings]`), []string{grp, "anything but rbac.authorization.k8s.io"}},
		"certificatesigningrequests":        {entry(`[certificates.k8s.io]`, `[certificatesigningrequests]`), []string{res, grp, "kubelets renew their certificates"}},
		"apiservices":                       {entry(`[apiregistration.k8s.io]`, `[apiservices]`), []string{grp, "aggregated APIs"}},
		"serviceaccounts":                   {entry(`[""]`, `[serviceaccounts]`), []string{res, "anything but serviceaccounts"}},
		"bindings":                          {entry(`[""]`, `[bindings]`), []string{res, "the scheduler places Pods through them"}},
		"QuantumNodes a second time":        {entry(`[qn.dev]`, `[quantumnodes]`), []string{res, grp, "have their own webhook entries"}},
		"CONNECT":                           {`webhook: {additionalResources: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CONNECT]}]}`, []string{"/webhook/additionalResources/0/operations/0", "'CREATE', 'UPDATE', 'DELETE'"}},
		"a failurePolicy in the wrong case": {`webhook: {additionalResources: [{apiGroups: [""], apiVersions: [v1], resources: [pods], failurePolicy: fail}]}`, []string{"/webhook/additionalResources/0/failurePolicy", "'Ignore', 'Fail'"}},
		"no group":                          {`webhook: {additionalResources: [{apiVersions: [v1], resources: [pods]}]}`, []string{"/webhook/additionalResources/0", "missing property 'apiGroups'"}},
		"a misspelled key":                  {`webhook: {additionalResources: [{apiGroups: [""], apiVersions: [v1], resources: [pods], scope: Cluster}]}`, []string{"additional properties 'scope' not allowed"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := chartrender.Render(releaseName, releaseNS, values(t, tc.values))
			if err == nil {
				t.Fatalf("values %s were accepted", tc.values)
			}
			for _, part := range tc.want {
				if !strings.Contains(strings.ReplaceAll(err.Error(), `\'`, `'`), part) {
					t.Errorf("error lacks %q:\n%v", part, err)
				}
			}
		})
	}
}

// Through a real kube-apiserver, with nothing serving the webhook (an
// outage, or the moments after an install): a Pod is admitted unjudged
// under the default failurePolicy Ignore, so a webhook that is down never
// blocks Pods; with failurePolicy Fail set explicitly it is refused in an
// ordinary namespace and admitted in kube-system and the release
// namespace; a ConfigMap is never touched.
func TestAdditionalResourcesFailSafeWithTheWebhookDown(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	for _, ns := range []string{releaseNS, "team-a"} {
		ensureNamespace(t, c, ns, nil)
	}
	apply := func(snippet string) {
		t.Helper()
		data, err := yaml.Marshal(render(t, snippet).Find("ValidatingWebhookConfiguration", fullname).Object)
		if err != nil {
			t.Fatal(err)
		}
		kubectl(t, c, string(data), "apply", "--server-side", "--field-manager=helm", "--force-conflicts", "-f", "-")
	}
	t.Cleanup(func() {
		_, _ = c.RunKubectl(ctx, "", "delete", "validatingwebhookconfiguration", fullname, "--ignore-not-found")
	})
	n := 0
	createPod := func(ns string) error {
		n++
		_, err := c.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", n)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:latest"}}},
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	const podsEntry = `webhook: {additionalResources: [{apiGroups: [""], apiVersions: [v1], resources: [pods]%s}]}`

	// Fail first, to see the configuration is in effect at all.
	apply(fmt.Sprintf(podsEntry, ", failurePolicy: Fail"))
	if err := harness.Eventually(ctx, 20*time.Second, func() error {
		err := createPod("team-a")
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "`+additionalFailWebhookName+`"`) {
			return fmt.Errorf("a Pod in team-a with failurePolicy Fail and no webhook: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"kube-system", releaseNS} {
		if err := createPod(ns); err != nil {
			t.Errorf("namespace %s is excluded, yet a Pod there: %v", ns, err)
		}
	}
	if _, err := c.Kube.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "untouched"}},
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a ConfigMap in team-a: the webhook reaches beyond the resources named: %v", err)
	}

	// The default: Ignore. A webhook that is down lets Pods through.
	apply(fmt.Sprintf(podsEntry, ""))
	if err := harness.Eventually(ctx, 20*time.Second, func() error { return createPod("team-a") }); err != nil {
		t.Fatalf("a Pod in team-a with the default failurePolicy (Ignore) and no webhook: %v", err)
	}
	got, err := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range got.Webhooks {
		if w.Name == additionalWebhookName && (w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore) {
			t.Errorf("the API server holds failurePolicy %v for %s", deref(w.FailurePolicy), w.Name)
		}
	}
}
