package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Every object of every variation goes to a real kube-apiserver as a
// server-side apply in dry-run mode with strict field validation: the API
// server checks our webhook configurations, Deployments and PDB against its
// own validation, and our Issuers and Certificates against cert-manager's
// CRD schemas. Nothing is stored.
func TestAPIServerAcceptsEveryRenderedObject(t *testing.T) {
	c := cluster(t)
	ensureNamespace(t, c, releaseNS, nil)
	cases := map[string]string{"default values": ""}
	for name, v := range variations {
		cases[name] = v.values
	}
	for name, snippet := range cases {
		t.Run(name, func(t *testing.T) {
			rel := render(t, snippet)
			stream, err := rel.YAML()
			if err != nil {
				t.Fatal(err)
			}
			out := kubectl(t, c, stream, "apply", "--server-side", "--dry-run=server", "--validate=strict",
				"--field-manager=helm", "-f", "-")
			for _, obj := range rel.Objects {
				line := fmt.Sprintf("%s/%s serverside-applied (server dry run)", resourceOf(obj), obj.GetName())
				if !strings.Contains(out, line) {
					t.Errorf("kubectl did not report %q:\n%s", line, out)
				}
			}
		})
	}
}

// resourceOf is how kubectl names an object's type in its output:
// the lower-case kind, qualified by its group outside the core group.
func resourceOf(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	kind := strings.ToLower(gvk.Kind)
	if gvk.Group == "" {
		return kind
	}
	return kind + "." + gvk.Group
}

// The webhook configurations behave as docs/install.md says, with the API
// server's own admission machinery and no webhook running (the state right
// after an install, or during an outage): QuantumNode writes are refused
// in ordinary namespaces and go through in the excluded ones; other
// resources are never touched; and each emergency switch lets writes
// through again. Only the two configurations are created for real.
func TestWebhookConfigurationsFailSafeWithTheWebhookDown(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ensureNamespace(t, c, releaseNS, nil)
	ensureNamespace(t, c, "team-a", nil)
	ensureNamespace(t, c, "team-b", nil)

	apply := func(snippet string) {
		t.Helper()
		var stream strings.Builder
		for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
			obj := render(t, snippet).Find(kind, fullname)
			data, err := yaml.Marshal(obj.Object)
			if err != nil {
				t.Fatal(err)
			}
			stream.WriteString("---\n")
			stream.Write(data)
		}
		kubectl(t, c, stream.String(), "apply", "--server-side", "--field-manager=helm", "--force-conflicts", "-f", "-")
	}
	t.Cleanup(func() {
		_, _ = c.RunKubectl(ctx, "", "delete", "validatingwebhookconfiguration,mutatingwebhookconfiguration", fullname, "--ignore-not-found")
	})

	n := 0
	create := func(ns string) error {
		n++
		qn := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
			"metadata": map[string]any{"name": fmt.Sprintf("qn-%d", n)},
			"spec": map[string]any{
				"hardware": map[string]any{"arch": "amd64"},
				"services": []any{map[string]any{"name": "mqtt", "port": int64(8883)}},
			},
		}}
		_, err := c.Dynamic.Resource(harness.QuantumNodes).Namespace(ns).Create(ctx, qn, metav1.CreateOptions{})
		return err
	}
	refused := func(ns string) func() error {
		return func() error {
			err := create(ns)
			if err == nil {
				return fmt.Errorf("a QuantumNode in %s was admitted with no webhook to judge it", ns)
			}
			if !strings.Contains(err.Error(), `failed calling webhook "mutate.quantumnodes.qn.dev"`) {
				return fmt.Errorf("refused, but not by the webhook's failurePolicy: %v", err)
			}
			return nil
		}
	}
	admitted := func(ns string) func() error {
		return func() error {
			if err := create(ns); err != nil {
				return fmt.Errorf("a QuantumNode in %s: %v", ns, err)
			}
			return nil
		}
	}
	eventually := func(what string, cond func() error) {
		t.Helper()
		if err := harness.Eventually(ctx, 20*time.Second, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// failurePolicy Fail (the default), nothing serving.
	apply("webhook: {namespaceSelector: {excludeNamespaces: [kube-system, team-b]}}")
	eventually("the configurations take effect", refused("team-a"))
	for _, ns := range []string{releaseNS, "kube-system", "team-b"} {
		if err := admitted(ns)(); err != nil {
			t.Errorf("namespace %s is excluded, yet: %v", ns, err)
		}
	}
	if _, err := c.Kube.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("a ConfigMap in team-a was refused: the webhooks reach beyond QuantumNodes: %v", err)
	}

	// No namespace editor can opt out: neither the old opt-out label nor a
	// forged kubernetes.io/metadata.name (the API server keeps it equal to
	// the name) keeps writes away from the webhook.
	kubectl(t, c, "", "label", "namespace", "team-a", "qn.dev/admission=disabled")
	kubectl(t, c, "", "label", "namespace", "team-a", "kubernetes.io/metadata.name=kube-system", "--overwrite")
	if got := kubectl(t, c, "", "get", "namespace", "team-a", "-o", "jsonpath={.metadata.labels.kubernetes\\.io/metadata\\.name}"); got != "team-a" {
		t.Errorf("kubernetes.io/metadata.name of team-a is %q after a forged label", got)
	}
	if err := refused("team-a")(); err != nil {
		t.Errorf("a namespace editor's label opted team-a out: %v", err)
	}
	kubectl(t, c, "", "label", "namespace", "team-a", "qn.dev/admission-")

	// Emergency switch 1: exclude one namespace through the values.
	apply("webhook: {namespaceSelector: {excludeNamespaces: [kube-system, team-a]}}")
	eventually("team-a excluded through the values", admitted("team-a"))
	apply("")
	eventually("team-a judged again", refused("team-a"))

	// Emergency switch 2: failurePolicy Ignore through the values.
	apply("webhook: {failurePolicy: Ignore}")
	eventually("failurePolicy Ignore", admitted("team-a"))
	apply("")
	eventually("failurePolicy Fail again", refused("team-a"))

	// Emergency switch 3, and the end of an uninstall: the configurations
	// deleted by the release's label. None is left behind.
	kubectl(t, c, "", "delete", "validatingwebhookconfiguration,mutatingwebhookconfiguration",
		"-l", "app.kubernetes.io/instance="+releaseName)
	eventually("the configurations deleted", admitted("team-a"))
	if out := kubectl(t, c, "", "get", "validatingwebhookconfiguration,mutatingwebhookconfiguration",
		"-l", "app.kubernetes.io/instance="+releaseName, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("configurations left behind: %s", out)
	}
}
