package chart

import (
	"encoding/base64"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testCABundle stands for a user's CA bundle; the chart only passes it on.
var testCABundle = base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"))

// variations are the value sets users are expected to install with, each
// with what it must change in the rendering. The dry-run test sends every
// one of them to the API server too.
var variations = map[string]struct {
	values string
	check  func(t *testing.T, rel *chartrender.Release)
}{
	"strict health thresholds and profiling: passed to both binaries, the kubelet's probes stay plain": {
		values: "health: {strict: {reloadGrace: 5m, maxPolicyAge: 24h, maxErrorRatio: 0.01, certMinValidity: 336h}}\nprofiling: {enabled: true}",
		check: func(t *testing.T, rel *chartrender.Release) {
			web := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
			ctl := container(t, &get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller").Spec.Template.Spec, "qn-controller")
			for _, c := range []*corev1.Container{web, ctl} {
				for name, want := range map[string]string{"strict-reload-grace": "5m", "strict-max-policy-age": "24h", "strict-max-error-ratio": "0.01", "pprof": ""} {
					if got, ok := flag(c.Args, name); !ok || got != want {
						t.Errorf("%s: --%s = %q (given: %v), want %q", c.Name, name, got, ok, want)
					}
				}
			}
			if got, _ := flag(web.Args, "strict-cert-min-validity"); got != "336h" {
				t.Errorf("qn-webhook: --strict-cert-min-validity = %q, want 336h", got)
			}
			for _, c := range []*corev1.Container{web, ctl} {
				for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
					if p != nil && p.HTTPGet != nil && strings.Contains(p.HTTPGet.Path, "strict") {
						t.Errorf("%s: a kubelet probe uses %s; strict health is for monitoring", c.Name, p.HTTPGet.Path)
					}
				}
			}
		},
	},
	"monitoring: ServiceMonitors for both binaries, the PrometheusRule and the dashboard": {
		values: monitoringValues,
		check: func(t *testing.T, rel *chartrender.Release) {
			k := rel.Kinds()
			if k["ServiceMonitor"] != 2 || k["PrometheusRule"] != 1 || rel.Find("ConfigMap", fullname+"-dashboard") == nil || rel.Find("Service", fullname+"-controller-metrics") == nil {
				t.Errorf("want 2 ServiceMonitors, a PrometheusRule, the dashboard ConfigMap and the controller's metrics Service; kinds %v", k)
			}
		},
	},
	"tracing to a collector: the endpoint, ratio and plaintext switch reach qn-webhook": {
		values: "tracing: {enabled: true, otlpEndpoint: otel-collector.observability:4317, insecure: true, sampleRatio: 0.25}",
		check: func(t *testing.T, rel *chartrender.Release) {
			web := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
			for name, want := range map[string]string{"otlp-endpoint": "otel-collector.observability:4317", "trace-sample-ratio": "0.25", "otlp-insecure": ""} {
				if got, ok := flag(web.Args, name); !ok || got != want {
					t.Errorf("--%s = %q (given: %v), want %q", name, got, ok, want)
				}
			}
		},
	},
	"own Secret and caBundle: no cert-manager objects, the CA in both configurations": {
		values: "certificates: {mode: secret, secret: {name: my-webhook-tls, caBundle: " + testCABundle + "}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if k := rel.Kinds(); k["Issuer"]+k["Certificate"] != 0 {
				t.Errorf("cert-manager objects rendered: %v", k)
			}
			for _, w := range webhooks(t, rel) {
				if base64.StdEncoding.EncodeToString(w.ClientConfig.CABundle) != testCABundle {
					t.Errorf("%s: caBundle is not the value given", w.Config)
				}
				if _, ok := w.Annotations["cert-manager.io/inject-ca-from"]; ok {
					t.Errorf("%s: still asks cainjector for its CA", w.Config)
				}
			}
			if s := volume(t, &webhookDeployment(t, rel).Spec.Template.Spec, "tls").Secret.SecretName; s != "my-webhook-tls" {
				t.Errorf("Pods mount Secret %s, want my-webhook-tls", s)
			}
		},
	},
	"an Issuer of your own: only the serving Certificate, issued by it": {
		values: "certificates: {certManager: {issuerRef: {name: corp-ca, kind: ClusterIssuer}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if k := rel.Kinds(); k["Issuer"] != 0 || k["Certificate"] != 1 {
				t.Errorf("want the serving Certificate alone, got %v", k)
			}
			ref := certificate(t, rel, webhookName).Spec.IssuerRef
			if ref != (issuerRef{Name: "corp-ca", Kind: "ClusterIssuer", Group: "cert-manager.io"}) {
				t.Errorf("issuerRef %+v", ref)
			}
		},
	},
	"a NetworkPolicy admits only the API server's sources to the admission port": {
		values: "webhook: {networkPolicy: {enabled: true, apiServer: {cidrs: [10.0.0.10/32], peers: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}}]}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if rel.Find("NetworkPolicy", webhookName) == nil {
				t.Errorf("want the webhook's NetworkPolicy, got %v", rel.Kinds())
			}
		},
	},
	"failurePolicy Ignore, the emergency switch, reaches both webhooks": {
		values: "webhook: {failurePolicy: Ignore}",
		check: func(t *testing.T, rel *chartrender.Release) {
			for _, w := range webhooks(t, rel) {
				if *w.FailurePolicy != admissionregistrationv1.Ignore {
					t.Errorf("%s: failurePolicy %s", w.Name, *w.FailurePolicy)
				}
			}
		},
	},
	"the longest timeout with a policy deadline just inside it": {
		values: "webhook: {timeoutSeconds: 10, policyEvalTimeout: 9500ms}",
		check: func(t *testing.T, rel *chartrender.Release) {
			for _, w := range webhooks(t, rel) {
				if *w.TimeoutSeconds != 10 {
					t.Errorf("%s: timeoutSeconds %d", w.Name, *w.TimeoutSeconds)
				}
			}
			c := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
			if v, _ := flag(c.Args, "policy-eval-timeout"); v != "9500ms" {
				t.Errorf("--policy-eval-timeout=%s", v)
			}
		},
	},
	"policies from a ConfigMap: the bundled files plus overrides, hot-reloaded from a directory mount": {
		values: "policies: {source: configMap, configMap: {files: {data.json: '{\"zones\": [\"cn-shanghai\"]}'}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			cm := get[corev1.ConfigMap](t, rel, "ConfigMap", fullname+"-policies")
			for _, f := range []string{"roles.yaml", "quantumnode.rego", "quantumnode_test.rego", "data.json"} {
				if _, ok := cm.Data[f]; !ok {
					t.Errorf("ConfigMap lacks %s; has %v", f, keys(cm.Data))
				}
			}
			spec := &webhookDeployment(t, rel).Spec.Template.Spec
			c := container(t, spec, "qn-webhook")
			m := mountOf(c, "policies")
			if m == nil || !m.ReadOnly || m.SubPath != "" {
				t.Fatalf("policy mount %+v: want a read-only directory mount", m)
			}
			if v, _ := flag(c.Args, "policy-dir"); v != m.MountPath {
				t.Errorf("--policy-dir=%s, mounted at %s", v, m.MountPath)
			}
			if v := volume(t, spec, "policies").ConfigMap; v == nil || v.Name != cm.Name || len(v.Items) != 0 {
				t.Errorf("policy volume %+v: want the whole ConfigMap %s", v, cm.Name)
			}
			// Restarting on a policy change would turn a broken edit into
			// crash-looping replicas; the server reloads instead.
			for k := range webhookDeployment(t, rel).Spec.Template.Annotations {
				if strings.HasPrefix(k, "checksum/") {
					t.Errorf("pod template annotation %s restarts the webhook on policy edits", k)
				}
			}
		},
	},
	"policies from a ConfigMap you manage: mounted, none rendered": {
		values: "policies: {source: configMap, configMap: {existingName: team-policies}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if rel.Kinds()["ConfigMap"] != 0 {
				t.Errorf("rendered a ConfigMap: %v", rel.Kinds())
			}
			if v := volume(t, &webhookDeployment(t, rel).Spec.Template.Spec, "policies").ConfigMap; v == nil || v.Name != "team-policies" {
				t.Errorf("policy volume %+v", v)
			}
		},
	},
	"policies from Git: a native git-sync sidecar the server waits for, sharing a read-only volume": {
		values: "policies: {source: gitSync, gitSync: {repo: 'https://git.example.com/ops/qn-policies.git', ref: main, path: /policies/prod/}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			spec := &webhookDeployment(t, rel).Spec.Template.Spec
			if len(spec.InitContainers) != 1 {
				t.Fatalf("want the git-sync sidecar as the one init container, got %d", len(spec.InitContainers))
			}
			gs := &spec.InitContainers[0]
			if gs.RestartPolicy == nil || *gs.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("git-sync restartPolicy %v: want a native sidecar (Always)", deref(gs.RestartPolicy))
			}
			if gs.StartupProbe == nil || gs.StartupProbe.HTTPGet == nil || gs.StartupProbe.HTTPGet.Path != "/" {
				t.Errorf("git-sync startupProbe %+v: qn-webhook must wait for the first sync", gs.StartupProbe)
			}
			if !strings.HasPrefix(gs.Image, "registry.k8s.io/git-sync/git-sync:v4.") {
				t.Errorf("git-sync image %s", gs.Image)
			}
			for f, want := range map[string]string{"repo": "https://git.example.com/ops/qn-policies.git", "ref": "main", "root": "/git", "link": "repo"} {
				if v, _ := flag(gs.Args, f); v != want {
					t.Errorf("git-sync --%s=%s, want %s", f, v, want)
				}
			}
			root := mountOf(gs, "git")
			c := container(t, spec, "qn-webhook")
			m := mountOf(c, "git")
			if root == nil || root.MountPath != "/git" || m == nil || !m.ReadOnly {
				t.Fatalf("git volume: git-sync mount %+v, qn-webhook mount %+v", root, m)
			}
			if v, _ := flag(c.Args, "policy-dir"); v != m.MountPath+"/repo/policies/prod" {
				t.Errorf("--policy-dir=%s, want the path inside the link %s/repo", v, m.MountPath)
			}
			if v := volume(t, spec, "git"); v.EmptyDir == nil {
				t.Errorf("git volume %+v: want an emptyDir", v)
			}
		},
	},
	"a shadow set from a ConfigMap you manage: mounted read-only and passed as --shadow-policy-dir": {
		values: "policies: {shadow: {source: configMap, configMapName: candidate-policies, cpu: 0.5}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			spec := &webhookDeployment(t, rel).Spec.Template.Spec
			c := container(t, spec, "qn-webhook")
			m := mountOf(c, "policies-shadow")
			if m == nil || !m.ReadOnly {
				t.Fatalf("policies-shadow mount %+v", m)
			}
			if v, _ := flag(c.Args, "shadow-policy-dir"); v != m.MountPath {
				t.Errorf("--shadow-policy-dir=%s, want the mount %s", v, m.MountPath)
			}
			if v, _ := flag(c.Args, "shadow-cpu"); v != "0.5" {
				t.Errorf("--shadow-cpu=%s", v)
			}
			if v := volume(t, spec, "policies-shadow").ConfigMap; v == nil || v.Name != "candidate-policies" {
				t.Errorf("policies-shadow volume %+v", v)
			}
			if _, ok := flag(c.Args, "policy-dir"); ok {
				t.Errorf("the served set is still the bundled one: no --policy-dir, got %v", c.Args)
			}
		},
	},
	"a shadow set from Git: a second git-sync sidecar at the candidate ref that qn-webhook never waits for": {
		values: "policies: {source: gitSync, gitSync: {repo: 'https://git.example.com/ops/qn-policies.git', ref: main, path: policies}, shadow: {source: gitSync, gitSync: {ref: candidate}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			spec := &webhookDeployment(t, rel).Spec.Template.Spec
			if len(spec.InitContainers) != 2 {
				t.Fatalf("want two git-sync sidecars, got %d init containers", len(spec.InitContainers))
			}
			served, shadow := container(t, spec, "git-sync"), container(t, spec, "git-sync-shadow")
			if shadow.StartupProbe != nil {
				t.Errorf("the shadow's git-sync has a startupProbe: a candidate ref that never syncs would hold qn-webhook back")
			}
			if served.StartupProbe == nil {
				t.Errorf("the served git-sync lost its startupProbe")
			}
			for f, want := range map[string]string{"repo": "https://git.example.com/ops/qn-policies.git", "ref": "candidate", "root": "/git-shadow", "link": "repo"} {
				if v, _ := flag(shadow.Args, f); v != want {
					t.Errorf("git-sync-shadow --%s=%s, want %s", f, v, want)
				}
			}
			if v, _ := flag(served.Args, "ref"); v != "main" {
				t.Errorf("git-sync --ref=%s, want main", v)
			}
			if a, b := containerPort(t, served, "git-sync"), containerPort(t, shadow, "git-sync-shadow"); a == b {
				t.Errorf("both git-sync sidecars bind port %d", a)
			}
			if m := mountOf(shadow, "git-shadow"); m == nil || m.MountPath != "/git-shadow" || m.ReadOnly {
				t.Errorf("git-sync-shadow's checkout mount %+v", m)
			}
			c := container(t, spec, "qn-webhook")
			if m := mountOf(c, "git-shadow"); m == nil || !m.ReadOnly {
				t.Errorf("qn-webhook's git-shadow mount %+v", m)
			}
			if v, _ := flag(c.Args, "shadow-policy-dir"); v != "/git-shadow/repo/policies" {
				t.Errorf("--shadow-policy-dir=%s, want /git-shadow/repo/policies", v)
			}
			if v, _ := flag(c.Args, "policy-dir"); v != "/git/repo/policies" {
				t.Errorf("--policy-dir=%s", v)
			}
		},
	},
	"policies from Git reach the background audit: qn-controller runs a git-sync sidecar of its own on the same checkout": {
		values: "policies: {source: gitSync, gitSync: {repo: 'git@git.example.com:ops/qn-policies.git', ref: main, path: policies, auth: {type: ssh, secretName: git-creds}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			web := &webhookDeployment(t, rel).Spec.Template.Spec
			dep := get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller")
			spec := &dep.Spec.Template.Spec
			gs := container(t, spec, "git-sync")
			for _, f := range []string{"repo", "ref", "root", "link", "ssh-key-file"} {
				want, _ := flag(container(t, web, "git-sync").Args, f)
				if v, _ := flag(gs.Args, f); v != want || v == "" {
					t.Errorf("qn-controller's git-sync --%s=%q, want qn-webhook's %q", f, v, want)
				}
			}
			if gs.StartupProbe == nil {
				t.Errorf("qn-controller's git-sync has no startupProbe: the audit would start before the first sync")
			}
			c := container(t, spec, "qn-controller")
			if v, _ := flag(c.Args, "audit"); v != "true" {
				t.Errorf("--audit=%s, want true with policies from Git", v)
			}
			want, _ := flag(container(t, web, "qn-webhook").Args, "policy-dir")
			if v, _ := flag(c.Args, "policy-dir"); v != want {
				t.Errorf("qn-controller --policy-dir=%s, want qn-webhook's %s", v, want)
			}
			if m := mountOf(c, "git"); m == nil || !m.ReadOnly || m.MountPath != "/git" {
				t.Errorf("qn-controller's git mount %+v", m)
			}
			if v := volume(t, spec, "git-secret").Secret; v == nil || v.SecretName != "git-creds" {
				t.Errorf("git-secret volume %+v", v)
			}
		},
	},
	"git-sync over SSH: the key Secret mounted read-only where git-sync looks": {
		values: "policies: {source: gitSync, gitSync: {repo: 'git@git.example.com:ops/qn-policies.git', auth: {type: ssh, secretName: git-creds}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			spec := &webhookDeployment(t, rel).Spec.Template.Spec
			gs := container(t, spec, "git-sync")
			if m := mountOf(gs, "git-secret"); m == nil || !m.ReadOnly || m.MountPath != "/etc/git-secret" {
				t.Errorf("git-secret mount %+v", m)
			}
			if v, _ := flag(gs.Args, "ssh-key-file"); v != "/etc/git-secret/ssh" {
				t.Errorf("--ssh-key-file=%s", v)
			}
			if v := volume(t, spec, "git-secret").Secret; v == nil || v.SecretName != "git-creds" {
				t.Errorf("git-secret volume %+v", v)
			}
			if m := mountOf(container(t, spec, "qn-webhook"), "git-secret"); m != nil {
				t.Errorf("qn-webhook mounts the Git credentials")
			}
		},
	},
	"git-sync over HTTPS: username from the Secret, password from a file": {
		values: "policies: {source: gitSync, gitSync: {repo: 'https://git.example.com/ops/qn-policies.git', auth: {type: https, secretName: git-creds}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			gs := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "git-sync")
			if v, _ := flag(gs.Args, "password-file"); v != "/etc/git-secret/password" {
				t.Errorf("--password-file=%s", v)
			}
			var user *corev1.EnvVar
			for i := range gs.Env {
				if gs.Env[i].Name == "GITSYNC_USERNAME" {
					user = &gs.Env[i]
				}
				if strings.Contains(gs.Env[i].Name, "PASSWORD") {
					t.Errorf("password in the environment: %s", gs.Env[i].Name)
				}
			}
			if user == nil || user.ValueFrom == nil || user.ValueFrom.SecretKeyRef == nil || user.ValueFrom.SecretKeyRef.Name != "git-creds" {
				t.Errorf("GITSYNC_USERNAME %+v: want it from Secret git-creds", user)
			}
		},
	},
	"three replicas that must sit on three nodes": {
		values: "webhook: {replicas: 3, podAntiAffinity: hard}",
		check: func(t *testing.T, rel *chartrender.Release) {
			dep := webhookDeployment(t, rel)
			aa := dep.Spec.Template.Spec.Affinity.PodAntiAffinity
			if *dep.Spec.Replicas != 3 || aa == nil || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
				!selects(t, aa.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector, dep.Spec.Template.Labels) {
				t.Errorf("replicas %d, anti-affinity %+v", *dep.Spec.Replicas, aa)
			}
			if rel.Find("PodDisruptionBudget", webhookName) == nil {
				t.Error("no PodDisruptionBudget")
			}
		},
	},
	"one replica: no PodDisruptionBudget, which would block every drain": {
		values: "webhook: {replicas: 1}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if rel.Kinds()["PodDisruptionBudget"] != 0 {
				t.Error("a PodDisruptionBudget over a single replica")
			}
		},
	},
	"without the controller: no controller Deployment and no RBAC at all": {
		values: "controller: {enabled: false}",
		check: func(t *testing.T, rel *chartrender.Release) {
			k := rel.Kinds()
			if rel.Find("Deployment", fullname+"-controller") != nil || k["ClusterRole"]+k["ClusterRoleBinding"]+k["Role"]+k["RoleBinding"] != 0 || k["ServiceAccount"] != 1 {
				t.Errorf("kinds %v", k)
			}
		},
	},
	"the API server's client certificate required": {
		values: "webhook: {clientCA: {configMapName: apiserver-client-ca}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			spec := &webhookDeployment(t, rel).Spec.Template.Spec
			c := container(t, spec, "qn-webhook")
			m := mountOf(c, "client-ca")
			if v, _ := flag(c.Args, "client-ca-file"); m == nil || v != m.MountPath+"/ca.crt" {
				t.Errorf("--client-ca-file=%s, mount %+v", v, m)
			}
			if v := volume(t, spec, "client-ca").ConfigMap; v == nil || v.Name != "apiserver-client-ca" {
				t.Errorf("client-ca volume %+v", v)
			}
		},
	},
	"more namespaces excluded through the values": {
		values: "webhook: {namespaceSelector: {excludeNamespaces: [kube-system, monitoring]}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			for _, w := range webhooks(t, rel) {
				sel, _ := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
				for ns, want := range map[string]bool{"monitoring": false, "kube-system": false, releaseNS: false,
					"team-a,admission.example.com/qn=skip": true, "team-a,qn.dev/admission=disabled": true, "team-a": true} {
					if sel.Matches(namespaceLabels(ns)) != want {
						t.Errorf("%s: namespace %s sent=%v", w.Name, ns, !want)
					}
				}
			}
		},
	},
	"fullnameOverride names every object": {
		values: "fullnameOverride: qn",
		check: func(t *testing.T, rel *chartrender.Release) {
			for _, obj := range rel.Objects {
				if obj.GetKind() != "CustomResourceDefinition" && !strings.HasPrefix(obj.GetName(), "qn") {
					t.Errorf("%s %s", obj.GetKind(), obj.GetName())
				}
			}
			if rel.Find("Deployment", "qn-webhook") == nil || rel.Find("ValidatingWebhookConfiguration", "qn") == nil {
				t.Errorf("objects %v", rel.Kinds())
			}
		},
	},
	"images, pull policy and pull secrets from values": {
		values: "imagePullSecrets: [{name: regcred}]\nwebhook: {image: {repository: registry.example.com/qn-webhook, tag: v9.9.9, pullPolicy: Always}}\ncontroller: {image: {repository: registry.example.com/qn-controller}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			dep := webhookDeployment(t, rel)
			c := container(t, &dep.Spec.Template.Spec, "qn-webhook")
			if c.Image != "registry.example.com/qn-webhook:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("webhook image %s %s", c.Image, c.ImagePullPolicy)
			}
			ctl := get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller")
			if img := ctl.Spec.Template.Spec.Containers[0].Image; img != "registry.example.com/qn-controller:0.1.0" {
				t.Errorf("controller image %s: want the chart's appVersion as tag", img)
			}
			for _, d := range []*appsv1.Deployment{dep, ctl} {
				if !slices.Equal(d.Spec.Template.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
					t.Errorf("%s: imagePullSecrets %v", d.Name, d.Spec.Template.Spec.ImagePullSecrets)
				}
			}
		},
	},
	"additional resources: Pods (Ignore) and Deployments (Fail) in entries of their own, told to qn-webhook": {
		values: additionalValues,
		check: func(t *testing.T, rel *chartrender.Release) {
			for _, name := range []string{additionalWebhookName, additionalFailWebhookName} {
				if validatingWebhook(t, rel, name) == nil {
					t.Errorf("no %s entry", name)
				}
			}
			c := container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook")
			if v, _ := flag(c.Args, "additional-resources"); v != "pods.v1:CREATE,UPDATE" {
				t.Errorf("--additional-resources=%s, want pods.v1:CREATE,UPDATE first", v)
			}
		},
	},
}

func TestVariations(t *testing.T) {
	for name, v := range variations {
		t.Run(name, func(t *testing.T) {
			rel := render(t, v.values)
			v.check(t, rel)
			// Whatever the values, the fail-safe core stays.
			for _, w := range webhooks(t, rel) {
				r := w.Rules[0]
				if !slices.Equal(r.APIGroups, []string{"qn.dev"}) || !slices.Equal(r.Resources, []string{"quantumnodes"}) ||
					*w.SideEffects != admissionregistrationv1.SideEffectClassNone || w.FailurePolicy == nil || w.TimeoutSeconds == nil {
					t.Errorf("%s lost a fail-safe setting: %+v", w.Name, w)
				}
				sel, _ := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
				if sel.Matches(namespaceLabels("kube-system")) || sel.Matches(namespaceLabels(releaseNS)) {
					t.Errorf("%s: sends kube-system or the release namespace", w.Name)
				}
			}
			for _, dep := range deployments(t, rel) {
				checkHardened(t, dep)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
