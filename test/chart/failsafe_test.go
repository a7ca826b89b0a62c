package chart

import (
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/releaseutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// The properties that keep a cluster from being locked out by our webhook
// or by an expired certificate, checked on what the default values render.
func TestDefaultsAreFailSafe(t *testing.T) {
	rel := render(t, "")

	checks := map[string]func(t *testing.T){
		"both webhooks match only qn.dev quantumnodes, never a wildcard": func(t *testing.T) {
			for _, w := range webhooks(t, rel) {
				if len(w.Rules) != 1 {
					t.Fatalf("%s: want one rule, got %+v", w.Name, w.Rules)
				}
				r := w.Rules[0]
				if !slices.Equal(r.APIGroups, []string{"qn.dev"}) || !slices.Equal(r.Resources, []string{"quantumnodes"}) ||
					!slices.Equal(r.APIVersions, []string{"v1alpha1"}) {
					t.Errorf("%s: rule %+v covers more than qn.dev/v1alpha1 quantumnodes", w.Name, r.Rule)
				}
				if r.Scope == nil || *r.Scope != admissionregistrationv1.NamespacedScope {
					t.Errorf("%s: scope %v, want Namespaced", w.Name, deref(r.Scope))
				}
				for _, field := range [][]string{r.APIGroups, r.APIVersions, r.Resources} {
					for _, v := range field {
						if strings.Contains(v, "*") {
							t.Errorf("%s: wildcard %q in a rule", w.Name, v)
						}
					}
				}
				for _, op := range r.Operations {
					if op == admissionregistrationv1.OperationAll || op == admissionregistrationv1.Connect {
						t.Errorf("%s: operation %s", w.Name, op)
					}
				}
			}
		},
		"validation judges CREATE, UPDATE and DELETE; mutation CREATE and UPDATE": func(t *testing.T) {
			ops := func(rules []admissionregistrationv1.RuleWithOperations) []admissionregistrationv1.OperationType {
				return rules[0].Operations
			}
			want := []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}
			if got := ops(validating(t, rel).Webhooks[0].Rules); !slices.Equal(got, want) {
				t.Errorf("validating operations %v, want %v", got, want)
			}
			want = want[:2]
			if got := ops(mutating(t, rel).Webhooks[0].Rules); !slices.Equal(got, want) {
				t.Errorf("mutating operations %v, want %v", got, want)
			}
		},
		"no side effects, v1 reviews, Fail, 5 seconds, Equivalent matching": func(t *testing.T) {
			for _, w := range webhooks(t, rel) {
				if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
					t.Errorf("%s: sideEffects %v, want None", w.Name, deref(w.SideEffects))
				}
				if !slices.Equal(w.ReviewVersions, []string{"v1"}) {
					t.Errorf("%s: admissionReviewVersions %v, want [v1]", w.Name, w.ReviewVersions)
				}
				if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
					t.Errorf("%s: failurePolicy %v, want Fail stated explicitly", w.Name, deref(w.FailurePolicy))
				}
				if w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 {
					t.Errorf("%s: timeoutSeconds %v, want 5", w.Name, deref(w.TimeoutSeconds))
				}
				if w.MatchPolicy == nil || *w.MatchPolicy != admissionregistrationv1.Equivalent {
					t.Errorf("%s: matchPolicy %v, want Equivalent", w.Name, deref(w.MatchPolicy))
				}
				if w.ObjectSelector != nil && (len(w.ObjectSelector.MatchLabels) > 0 || len(w.ObjectSelector.MatchExpressions) > 0) {
					t.Errorf("%s: an objectSelector would let object labels skip the webhook: %v", w.Name, w.ObjectSelector)
				}
			}
		},
		"kube-system and the release namespace are never sent, and no label opts a namespace out": func(t *testing.T) {
			for _, w := range webhooks(t, rel) {
				sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
				if err != nil {
					t.Fatalf("%s: %v", w.Name, err)
				}
				for ns, want := range map[string]bool{
					"kube-system":                       false,
					releaseNS:                           false,
					"team-a":                            true,
					"team-a,qn.dev/admission=disabled":  true, // a label any namespace editor may set is no opt-out
					"team-a,qn.dev/admission=enabled":   true,
					"default":                           true,
					"kube-public":                       true, // only what is listed is excluded
					"team-b,other.example/label=ignore": true,
				} {
					if got := sel.Matches(namespaceLabels(ns)); got != want {
						t.Errorf("%s: namespace %s sent=%v, want %v (selector %s)", w.Name, ns, got, want, sel)
					}
				}
			}
		},
		"the mutating webhook's reinvocationPolicy is set, to IfNeeded": func(t *testing.T) {
			w := mutating(t, rel).Webhooks[0]
			if w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
				t.Errorf("reinvocationPolicy %v, want IfNeeded", deref(w.ReinvocationPolicy))
			}
		},
		"both webhooks call the Service's https port on /validate and /mutate": func(t *testing.T) {
			svc := get[corev1.Service](t, rel, "Service", webhookName)
			dep := webhookDeployment(t, rel)
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
				t.Errorf("Service selector %v does not select the webhook Pods %v", svc.Spec.Selector, dep.Spec.Template.Labels)
			}
			paths := map[string]string{}
			for _, w := range webhooks(t, rel) {
				s := w.ClientConfig.Service
				if s == nil || w.ClientConfig.URL != nil {
					t.Fatalf("%s: clientConfig %+v must name the Service", w.Name, w.ClientConfig)
				}
				if s.Name != svc.Name || s.Namespace != releaseNS || s.Port == nil {
					t.Fatalf("%s: calls %s/%s, want %s/%s", w.Name, s.Namespace, s.Name, releaseNS, svc.Name)
				}
				paths[w.Config] = *s.Path
				port := servicePort(t, svc, *s.Port)
				c := container(t, &dep.Spec.Template.Spec, "qn-webhook")
				listen, _ := flag(c.Args, "listen-address")
				if got := containerPort(t, c, port.TargetPort.StrVal); ":"+strconv.Itoa(int(got)) != listen {
					t.Errorf("%s: Service port %d goes to container port %d, but qn-webhook listens on %q", w.Name, *s.Port, got, listen)
				}
			}
			if paths["ValidatingWebhookConfiguration"] != "/validate" || paths["MutatingWebhookConfiguration"] != "/mutate" {
				t.Errorf("paths %v", paths)
			}
		},
		"cert-manager injects the CA of the serving Certificate into both configurations": func(t *testing.T) {
			dep := webhookDeployment(t, rel)
			secret := volume(t, &dep.Spec.Template.Spec, "tls").Secret.SecretName
			for _, w := range webhooks(t, rel) {
				from := w.Annotations["cert-manager.io/inject-ca-from"]
				ns, name, _ := strings.Cut(from, "/")
				if ns != releaseNS {
					t.Fatalf("%s: inject-ca-from %q is not in the release namespace", w.Config, from)
				}
				cert := certificate(t, rel, name)
				if cert.Spec.SecretName != secret {
					t.Errorf("%s: injects the CA of Certificate %s (Secret %s), but the Pods serve Secret %s", w.Config, name, cert.Spec.SecretName, secret)
				}
				if len(w.ClientConfig.CABundle) != 0 {
					t.Errorf("%s: a caBundle in the chart would fight cainjector", w.Config)
				}
			}
		},
		"the chain is self-signed Issuer, CA Certificate, CA Issuer, serving Certificate": func(t *testing.T) {
			serving := certificate(t, rel, webhookName)
			caIssuer := issuer(t, rel, serving.Spec.IssuerRef)
			if caIssuer.Spec.CA == nil {
				t.Fatalf("the serving Certificate's Issuer %s is not a CA Issuer", caIssuer.Name)
			}
			caCert := certificateBySecret(t, rel, caIssuer.Spec.CA.SecretName)
			if !caCert.Spec.IsCA {
				t.Errorf("Certificate %s signs serving certificates but is not isCA", caCert.Name)
			}
			root := issuer(t, rel, caCert.Spec.IssuerRef)
			if root.Spec.SelfSigned == nil {
				t.Errorf("the CA Certificate's Issuer %s is not self-signed", root.Name)
			}
			if got := rel.Kinds(); got["Issuer"] != 2 || got["Certificate"] != 2 {
				t.Errorf("want 2 Issuers and 2 Certificates, got %v", got)
			}
		},
		"the serving certificate names the Service as svc, svc.ns and svc.ns.svc": func(t *testing.T) {
			serving := certificate(t, rel, webhookName)
			svc := validating(t, rel).Webhooks[0].ClientConfig.Service.Name
			want := []string{svc, svc + "." + releaseNS, svc + "." + releaseNS + ".svc"}
			if !slices.Equal(serving.Spec.DNSNames, want) {
				t.Errorf("dnsNames %v, want %v", serving.Spec.DNSNames, want)
			}
			if !slices.Contains(serving.Spec.Usages, "server auth") {
				t.Errorf("usages %v lack server auth", serving.Spec.Usages)
			}
		},
		"certificates renew well before they expire, and a CA renewal breaks no handshake": func(t *testing.T) {
			serving := certificate(t, rel, webhookName)
			ca := certificate(t, rel, fullname+"-ca")
			sd, sr := hours(t, serving.Spec.Duration), hours(t, serving.Spec.RenewBefore)
			cd, cr := hours(t, ca.Spec.Duration), hours(t, ca.Spec.RenewBefore)
			if sr < sd/4 || sr < 7*24*time.Hour {
				t.Errorf("serving certificate renews %s before a %s expiry: want at least a quarter of its life and a week", sr, sd)
			}
			// Every serving certificate signed by the old CA is renewed (from
			// the new one) before the old CA expires.
			if cr < sd {
				t.Errorf("CA renews %s before expiry, less than one serving certificate lifetime (%s)", cr, sd)
			}
			if cd <= cr {
				t.Errorf("CA duration %s <= renewBefore %s", cd, cr)
			}
			if ca.Spec.PrivateKey.RotationPolicy != "Never" {
				t.Errorf("CA private key rotationPolicy %q: a renewed CA with a new key would not verify serving certificates signed before", ca.Spec.PrivateKey.RotationPolicy)
			}
			if serving.Spec.PrivateKey.RotationPolicy != "Always" {
				t.Errorf("serving private key rotationPolicy %q, want Always", serving.Spec.PrivateKey.RotationPolicy)
			}
		},
		"the serving Secret is mounted as a directory, never through subPath": func(t *testing.T) {
			for _, dep := range deployments(t, rel) {
				for _, c := range allContainers(&dep.Spec.Template.Spec) {
					for _, m := range c.VolumeMounts {
						if m.SubPath != "" || m.SubPathExpr != "" {
							t.Errorf("%s/%s mounts %s with subPath: updates would never reach the Pod", dep.Name, c.Name, m.Name)
						}
					}
				}
			}
			dep := webhookDeployment(t, rel)
			c := container(t, &dep.Spec.Template.Spec, "qn-webhook")
			m := mountOf(c, "tls")
			for _, f := range []string{"tls-cert-file", "tls-key-file"} {
				if v, _ := flag(c.Args, f); !strings.HasPrefix(v, m.MountPath+"/") {
					t.Errorf("--%s=%s is not in the Secret's mount %s", f, v, m.MountPath)
				}
			}
		},
		"two replicas spread over nodes, never both down for an upgrade or a drain": func(t *testing.T) {
			dep := webhookDeployment(t, rel)
			if *dep.Spec.Replicas != 2 {
				t.Errorf("replicas %d, want 2", *dep.Spec.Replicas)
			}
			if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 0 {
				t.Errorf("rolling update %+v: want maxUnavailable 0", ru)
			}
			aa := dep.Spec.Template.Spec.Affinity.PodAntiAffinity
			if aa == nil || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Fatalf("want a preferred pod anti-affinity, got %+v", aa)
			}
			term := aa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
			if term.TopologyKey != corev1.LabelHostname || !selects(t, term.LabelSelector, dep.Spec.Template.Labels) {
				t.Errorf("anti-affinity term %+v does not keep the webhook's own Pods apart per node", term)
			}
			pdb := get[policyv1.PodDisruptionBudget](t, rel, "PodDisruptionBudget", webhookName)
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || !selects(t, pdb.Spec.Selector, dep.Spec.Template.Labels) {
				t.Errorf("PodDisruptionBudget %+v: want minAvailable 1 over the webhook Pods", pdb.Spec)
			}
			if pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
				t.Errorf("unhealthyPodEvictionPolicy %v: an unready replica must not block drains", deref(pdb.Spec.UnhealthyPodEvictionPolicy))
			}
		},
		"probes use the plain-HTTP probe port, never the admission listener": func(t *testing.T) {
			dep := webhookDeployment(t, rel)
			c := container(t, &dep.Spec.Template.Spec, "qn-webhook")
			probeAddr, _ := flag(c.Args, "probe-address")
			for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil {
					t.Fatalf("no %s probe", name)
				}
				port := containerPort(t, c, p.HTTPGet.Port.StrVal)
				if ":"+strconv.Itoa(int(port)) != probeAddr || p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
					t.Errorf("%s probe on port %d (%s), want the probe address %s over HTTP", name, port, p.HTTPGet.Scheme, probeAddr)
				}
			}
			if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("probe paths %s, %s", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
			}
			ctl := container(t, &get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller").Spec.Template.Spec, "qn-controller")
			if ctl.ReadinessProbe == nil || ctl.LivenessProbe == nil {
				t.Errorf("qn-controller lacks probes")
			}
		},
		"every container is non-root, read-only, unprivileged, RuntimeDefault, with resources": func(t *testing.T) {
			for _, dep := range deployments(t, rel) {
				checkHardened(t, dep)
			}
		},
		"qn-webhook gets no service account token; qn-controller, which calls the API, does": func(t *testing.T) {
			dep := webhookDeployment(t, rel)
			if a := dep.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
				t.Errorf("webhook Pods automountServiceAccountToken %v, want false", deref(a))
			}
			sa := get[corev1.ServiceAccount](t, rel, "ServiceAccount", dep.Spec.Template.Spec.ServiceAccountName)
			if a := sa.AutomountServiceAccountToken; a == nil || *a {
				t.Errorf("webhook ServiceAccount automountServiceAccountToken %v, want false", deref(a))
			}
			for _, obj := range rel.Objects {
				if strings.HasSuffix(obj.GetKind(), "Binding") && strings.Contains(obj.GetName(), "webhook") {
					t.Errorf("the webhook's ServiceAccount is bound to a role: %s %s", obj.GetKind(), obj.GetName())
				}
			}
			ctl := get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller")
			if a := ctl.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
				t.Errorf("controller Pods automountServiceAccountToken %v, want true", deref(a))
			}
		},
		"the bundled policies serve by default: no --policy-dir, no policy volume": func(t *testing.T) {
			c := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
			if v, ok := flag(c.Args, "policy-dir"); ok {
				t.Errorf("--policy-dir=%s with the default values", v)
			}
			if rel.Kinds()["ConfigMap"] != 0 {
				t.Errorf("a policy ConfigMap with the default values")
			}
		},
		"the policy deadline sits well inside the webhook timeout": func(t *testing.T) {
			c := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
			v, _ := flag(c.Args, "policy-eval-timeout")
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 || d > 5*time.Second/2 {
				t.Errorf("--policy-eval-timeout=%s with timeoutSeconds 5", v)
			}
		},
		"a stopping replica keeps serving until endpoints forget it, then drains": func(t *testing.T) {
			dep := webhookDeployment(t, rel)
			c := container(t, &dep.Spec.Template.Spec, "qn-webhook")
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
				t.Fatalf("no preStop sleep: %+v", c.Lifecycle)
			}
			grace, _ := flag(c.Args, "shutdown-grace-period")
			d, _ := time.ParseDuration(grace)
			total := time.Duration(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
			if total <= d+time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second {
				t.Errorf("terminationGracePeriodSeconds %s leaves no room for preStop %ds + drain %s", total, c.Lifecycle.PreStop.Sleep.Seconds, d)
			}
		},
		"everything namespaced lands in the release namespace": func(t *testing.T) {
			clusterScoped := map[string]bool{"CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
				"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true,
				"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "QuantumNodeRoleTable": true}
			for _, obj := range rel.Objects {
				if clusterScoped[obj.GetKind()] {
					if obj.GetNamespace() != "" {
						t.Errorf("%s %s is cluster-scoped but names namespace %s", obj.GetKind(), obj.GetName(), obj.GetNamespace())
					}
					continue
				}
				if obj.GetNamespace() != releaseNS {
					t.Errorf("%s %s in namespace %q, want %s", obj.GetKind(), obj.GetName(), obj.GetNamespace(), releaseNS)
				}
			}
		},
		"helm uninstall deletes everything it installed: no hooks, nothing kept": func(t *testing.T) {
			for _, obj := range rel.Objects[len(rel.CRDs):] {
				for k, v := range obj.GetAnnotations() {
					if strings.HasPrefix(k, "helm.sh/") {
						t.Errorf("%s %s has %s=%s: Helm would not delete it with the release", obj.GetKind(), obj.GetName(), k, v)
					}
				}
			}
			hooks, manifests, err := releaseutil.SortManifests(rel.Manifests, nil, releaseutil.UninstallOrder)
			if err != nil {
				t.Fatal(err)
			}
			if len(hooks) != 0 {
				t.Errorf("%d hooks", len(hooks))
			}
			// docs/install.md explains this order: Helm 3 deletes the
			// webhook configurations after the Service, hence the advice to
			// delete them first.
			pos := map[string]int{}
			for i, m := range manifests {
				pos[m.Head.Kind] = i
			}
			if pos["ValidatingWebhookConfiguration"] < pos["Service"] || pos["MutatingWebhookConfiguration"] < pos["Service"] {
				t.Errorf("Helm now deletes the webhook configurations before the Service: update the Uninstall section of docs/install.md")
			}
		},
		"NOTES.txt tells how to check the webhook works and how to switch it off": func(t *testing.T) {
			for _, want := range []string{
				"rollout status deployment/" + webhookName,
				"get certificate " + webhookName,
				"/readyz?verbose",
				"kubectl apply --dry-run=server",
				"webhook.failurePolicy=Ignore",
				"kubectl delete validatingwebhookconfiguration,mutatingwebhookconfiguration " + fullname,
				"kube-system", "excludeNamespaces={kube-system,<namespace>}",
			} {
				if !strings.Contains(rel.Notes, want) {
					t.Errorf("NOTES.txt lacks %q:\n%s", want, rel.Notes)
				}
			}
		},
	}
	for name, check := range checks {
		t.Run(name, check)
	}
}

// namespaceLabels turns "name,k=v,..." into the labels of such a namespace,
// kubernetes.io/metadata.name included as the API server sets it.
func namespaceLabels(spec string) labels.Set {
	parts := strings.Split(spec, ",")
	set := labels.Set{corev1.LabelMetadataName: parts[0]}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v
	}
	return set
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

func servicePort(t *testing.T, svc *corev1.Service, port int32) corev1.ServicePort {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return p
		}
	}
	t.Fatalf("Service %s has no port %d", svc.Name, port)
	return corev1.ServicePort{}
}

func containerPort(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return 0
}

func deployments(t *testing.T, rel *chartrender.Release) []*appsv1.Deployment {
	t.Helper()
	var out []*appsv1.Deployment
	for _, obj := range rel.Objects {
		if obj.GetKind() == "Deployment" {
			out = append(out, decodeStrict[appsv1.Deployment](t, obj))
		}
	}
	if len(out) == 0 {
		t.Fatal("no Deployments rendered")
	}
	return out
}

func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

// checkHardened checks the security settings and resources of every
// container of a Deployment, taking the Pod-level settings into account.
func checkHardened(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template.Spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	for _, c := range allContainers(&dep.Spec.Template.Spec) {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		where := dep.Name + "/" + c.Name
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = pod.RunAsNonRoot
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = pod.RunAsUser
		}
		if nonRoot == nil || !*nonRoot || uid == nil || *uid == 0 {
			t.Errorf("%s: not pinned to a non-root user (runAsNonRoot %v, runAsUser %v)", where, deref(nonRoot), deref(uid))
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: root filesystem is writable", where)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation not false", where)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", where)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities %+v, want drop [ALL] and nothing added", where, sc.Capabilities)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccomp %+v, want RuntimeDefault", where, seccomp)
		}
		r := c.Resources
		if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
			t.Errorf("%s: resources %+v, want cpu and memory requests and a memory limit", where, r)
		}
	}
}

// certificate is the part of a cert-manager Certificate the checks read,
// decoded loosely (the cert-manager API types are not a dependency).
type certificateSpec struct {
	Name string
	Spec struct {
		IsCA        bool
		SecretName  string
		DNSNames    []string
		Duration    string
		RenewBefore string
		Usages      []string
		PrivateKey  struct{ RotationPolicy string }
		IssuerRef   issuerRef
	}
}

type issuerRef struct{ Name, Kind, Group string }

type issuerSpec struct {
	Name string
	Spec struct {
		SelfSigned *struct{}
		CA         *struct{ SecretName string }
	}
}

func certificate(t *testing.T, rel *chartrender.Release, name string) *certificateSpec {
	t.Helper()
	obj := rel.Find("Certificate", name)
	if obj == nil || obj.GetAPIVersion() != "cert-manager.io/v1" {
		t.Fatalf("no cert-manager.io/v1 Certificate %q; kinds %v", name, rel.Kinds())
	}
	return looseCertificate(t, obj)
}

func looseCertificate(t *testing.T, obj *unstructured.Unstructured) *certificateSpec {
	t.Helper()
	c := &certificateSpec{Name: obj.GetName()}
	spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
	c.Spec.IsCA, _, _ = unstructured.NestedBool(spec, "isCA")
	c.Spec.SecretName, _, _ = unstructured.NestedString(spec, "secretName")
	c.Spec.DNSNames, _, _ = unstructured.NestedStringSlice(spec, "dnsNames")
	c.Spec.Duration, _, _ = unstructured.NestedString(spec, "duration")
	c.Spec.RenewBefore, _, _ = unstructured.NestedString(spec, "renewBefore")
	c.Spec.Usages, _, _ = unstructured.NestedStringSlice(spec, "usages")
	c.Spec.PrivateKey.RotationPolicy, _, _ = unstructured.NestedString(spec, "privateKey", "rotationPolicy")
	c.Spec.IssuerRef.Name, _, _ = unstructured.NestedString(spec, "issuerRef", "name")
	c.Spec.IssuerRef.Kind, _, _ = unstructured.NestedString(spec, "issuerRef", "kind")
	c.Spec.IssuerRef.Group, _, _ = unstructured.NestedString(spec, "issuerRef", "group")
	return c
}

func certificateBySecret(t *testing.T, rel *chartrender.Release, secret string) *certificateSpec {
	t.Helper()
	for _, obj := range rel.Objects {
		if obj.GetKind() == "Certificate" {
			if c := looseCertificate(t, obj); c.Spec.SecretName == secret {
				return c
			}
		}
	}
	t.Fatalf("no Certificate writes Secret %s", secret)
	return nil
}

func issuer(t *testing.T, rel *chartrender.Release, ref issuerRef) *issuerSpec {
	t.Helper()
	if ref.Kind != "Issuer" || ref.Group != "cert-manager.io" {
		t.Fatalf("issuerRef %+v: want a cert-manager.io Issuer of the release", ref)
	}
	obj := rel.Find("Issuer", ref.Name)
	if obj == nil {
		t.Fatalf("issuerRef names Issuer %q, which the chart does not render", ref.Name)
	}
	is := &issuerSpec{Name: ref.Name}
	if _, ok, _ := unstructured.NestedMap(obj.Object, "spec", "selfSigned"); ok {
		is.Spec.SelfSigned = &struct{}{}
	}
	if s, ok, _ := unstructured.NestedString(obj.Object, "spec", "ca", "secretName"); ok {
		is.Spec.CA = &struct{ SecretName string }{s}
	}
	return is
}

func hours(t *testing.T, d string) time.Duration {
	t.Helper()
	v, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("duration %q: %v", d, err)
	}
	return v
}

// deref shows what a pointer field holds, or that it is unset.
func deref[T any](p *T) any {
	if p == nil {
		return "<unset>"
	}
	return *p
}
