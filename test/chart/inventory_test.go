package chart

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/quantumnode/qn-admission/cmd/qn-webhook/app"
)

// With webhook.inventory, qn-webhook gets a token and list/watch on the
// resources named, nothing more; its flags parse as the binary's.
func TestTheInventoryGrantsListAndWatchOnItsResourcesOnly(t *testing.T) {
	rel := render(t, "webhook: {inventory: {enabled: true, maxLag: 45s, resources: [{apiGroup: qn.dev, resource: quantumnodes}, {apiGroup: '', resource: nodes}, {apiGroup: apps, resource: deployments}]}}")
	dep := webhookDeployment(t, rel)
	if a := dep.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
		t.Errorf("webhook Pods automountServiceAccountToken %v, want true with the inventory", deref(a))
	}
	sa := get[corev1.ServiceAccount](t, rel, "ServiceAccount", dep.Spec.Template.Spec.ServiceAccountName)
	if a := sa.AutomountServiceAccountToken; a == nil || !*a {
		t.Errorf("webhook ServiceAccount automountServiceAccountToken %v, want true", deref(a))
	}
	role := get[rbacv1.ClusterRole](t, rel, "ClusterRole", fullname+"-webhook-inventory")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"qn.dev"}, Resources: []string{"quantumnodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list", "watch"}},
	}
	if !slices.EqualFunc(role.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) && len(a.ResourceNames)+len(a.NonResourceURLs) == 0
	}) {
		t.Errorf("inventory ClusterRole rules %+v, want list and watch on exactly %+v", role.Rules, want)
	}
	binding := get[rbacv1.ClusterRoleBinding](t, rel, "ClusterRoleBinding", fullname+"-webhook-inventory")
	if len(binding.Subjects) != 1 || binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != releaseNS || binding.RoleRef.Name != role.Name {
		t.Errorf("binding %+v, want the webhook's ServiceAccount bound to %s", binding, role.Name)
	}
	c := container(t, &dep.Spec.Template.Spec, "qn-webhook")
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("qn-webhook", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatal(err)
	}
	if !opts.Inventory.Enabled || opts.Inventory.MaxLag.String() != "45s" {
		t.Errorf("qn-webhook inventory options %+v from %v, want enabled with a 45s bound", opts.Inventory, c.Args)
	}

	off := render(t, "")
	if off.Find("ClusterRole", fullname+"-webhook-inventory") != nil {
		t.Error("without the inventory the webhook must get no role")
	}
}
