package chart

import (
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const redisName = fullname + "-redis"

// The windows variations join the others, so their webhook arguments go
// through qn-webhook's own flag set and their objects through the API
// server's dry run like every other variation.
func init() {
	maps.Copy(variations, windowVariations)
}

var windowVariations = map[string]struct {
	values string
	check  func(t *testing.T, rel *chartrender.Release)
}{
	"windows in memory with two replicas: no Redis, and NOTES say the limit is per replica": {
		values: "windows: {store: memory}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if k := rel.Kinds(); k["NetworkPolicy"]+k["PersistentVolumeClaim"] != 0 || rel.Find("Deployment", redisName) != nil {
				t.Errorf("Redis objects rendered for the memory store: %v", k)
			}
			args := webhookArgs(t, rel)
			if v, _ := flag(args, "window-store"); v != "memory" {
				t.Errorf("--window-store=%s, want memory", v)
			}
			for _, f := range []string{"redis-address", "redis-password-file", "redis-tls", "window-store-timeout"} {
				if _, ok := flag(args, f); ok {
					t.Errorf("--%s given with the memory store", f)
				}
			}
			if !strings.Contains(rel.Notes, "counted per replica") || !strings.Contains(rel.Notes, "up to 2 times a role's limit") {
				t.Errorf("NOTES do not say the limit is per replica:\n%s", rel.Notes)
			}
		},
	},
	"windows in memory with one replica: exact, and NOTES warn of nothing": {
		values: "{windows: {store: memory}, webhook: {replicas: 1}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if strings.Contains(rel.Notes, "per replica") {
				t.Errorf("NOTES warn of per-replica windows with one replica:\n%s", rel.Notes)
			}
		},
	},
	"your own Redis with a password Secret and TLS with a CA: no bundled Redis, every file mounted where a flag points": {
		values: "windows: {redis: {address: 'redis.data.svc:6380', bundled: {enabled: false}, passwordSecret: {name: redis-auth, key: pw}, tls: {enabled: true, caConfigMap: redis-ca}}, storeTimeout: 250ms}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if rel.Find("Deployment", redisName) != nil || rel.Find("Service", redisName) != nil {
				t.Errorf("the bundled Redis rendered beside an address: %v", rel.Kinds())
			}
			spec := &webhookDeployment(t, rel).Spec.Template.Spec
			c := container(t, spec, "qn-webhook")
			want := map[string]string{"window-store": "redis", "redis-address": "redis.data.svc:6380", "window-store-timeout": "250ms", "redis-tls": ""}
			for f, v := range want {
				if got, ok := flag(c.Args, f); !ok || got != v {
					t.Errorf("--%s=%q (given %v), want %q", f, got, ok, v)
				}
			}
			pw := volume(t, spec, "redis-password")
			if pw.Secret == nil || pw.Secret.SecretName != "redis-auth" || len(pw.Secret.Items) != 1 || pw.Secret.Items[0].Key != "pw" {
				t.Errorf("password volume %+v, want key pw of Secret redis-auth", pw.VolumeSource)
			}
			if v, _ := flag(c.Args, "redis-password-file"); mountOf(c, "redis-password") == nil || v != mountOf(c, "redis-password").MountPath+"/pw" {
				t.Errorf("--redis-password-file=%s is not the mounted key", v)
			}
			ca := volume(t, spec, "redis-ca")
			if ca.ConfigMap == nil || ca.ConfigMap.Name != "redis-ca" {
				t.Errorf("CA volume %+v, want ConfigMap redis-ca", ca.VolumeSource)
			}
			if v, _ := flag(c.Args, "redis-tls-ca-file"); mountOf(c, "redis-ca") == nil || v != mountOf(c, "redis-ca").MountPath+"/ca.crt" {
				t.Errorf("--redis-tls-ca-file=%s is not the mounted CA", v)
			}
			if !strings.Contains(rel.Notes, "Redis at redis.data.svc:6380") {
				t.Errorf("NOTES do not name the Redis:\n%s", rel.Notes)
			}
		},
	},
	"Redis behind Sentinels with their own password: the webhook asks them for the master, no bundled Redis": {
		values: "windows: {redis: {bundled: {enabled: false}, sentinel: {addresses: ['s-0.data.svc:26379', 's-1.data.svc:26379'], masterName: windows, passwordSecret: {name: sentinel-auth, key: spw}}, passwordSecret: {name: redis-auth}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			if rel.Find("Deployment", redisName) != nil {
				t.Errorf("the bundled Redis rendered beside Sentinels: %v", rel.Kinds())
			}
			spec := &webhookDeployment(t, rel).Spec.Template.Spec
			c := container(t, spec, "qn-webhook")
			want := map[string]string{"redis-sentinel-addresses": "s-0.data.svc:26379,s-1.data.svc:26379", "redis-sentinel-master": "windows", "redis-password-file": "/etc/qn-webhook/redis/password"}
			for f, v := range want {
				if got, ok := flag(c.Args, f); !ok || got != v {
					t.Errorf("--%s=%q (given %v), want %q", f, got, ok, v)
				}
			}
			for _, f := range []string{"redis-address", "redis-cluster-addresses"} {
				if v, ok := flag(c.Args, f); ok {
					t.Errorf("--%s=%s given beside the Sentinels", f, v)
				}
			}
			pw := volume(t, spec, "redis-sentinel-password")
			if pw.Secret == nil || pw.Secret.SecretName != "sentinel-auth" || len(pw.Secret.Items) != 1 || pw.Secret.Items[0].Key != "spw" {
				t.Errorf("Sentinel password volume %+v, want key spw of Secret sentinel-auth", pw.VolumeSource)
			}
			if v, _ := flag(c.Args, "redis-sentinel-password-file"); mountOf(c, "redis-sentinel-password") == nil || v != mountOf(c, "redis-sentinel-password").MountPath+"/spw" {
				t.Errorf("--redis-sentinel-password-file=%s is not the mounted key", v)
			}
			if !strings.Contains(rel.Notes, `the Redis master "windows" that the Sentinels s-0.data.svc:26379, s-1.data.svc:26379 name`) {
				t.Errorf("NOTES do not name the Sentinels:\n%s", rel.Notes)
			}
		},
	},
	"a Redis Cluster: the webhook is given some of its nodes": {
		values: "windows: {redis: {bundled: {enabled: false}, cluster: {addresses: ['c-0.data.svc:6379', 'c-1.data.svc:6379']}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			args := webhookArgs(t, rel)
			if v, _ := flag(args, "redis-cluster-addresses"); v != "c-0.data.svc:6379,c-1.data.svc:6379" {
				t.Errorf("--redis-cluster-addresses=%s", v)
			}
			if v, ok := flag(args, "redis-address"); ok {
				t.Errorf("--redis-address=%s given beside the cluster", v)
			}
		},
	},
	"the bundled Redis with persistence and a password: an append-only file on a claim, the password from the Secret": {
		values: "windows: {redis: {passwordSecret: {name: redis-auth}, bundled: {persistence: {enabled: true, size: 2Gi, storageClass: fast}}}}",
		check: func(t *testing.T, rel *chartrender.Release) {
			pvc := get[corev1.PersistentVolumeClaim](t, rel, "PersistentVolumeClaim", redisName)
			if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "2Gi" || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast" {
				t.Errorf("claim %+v", pvc.Spec)
			}
			dep := get[appsv1.Deployment](t, rel, "Deployment", redisName)
			if v := volume(t, &dep.Spec.Template.Spec, "data"); v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != redisName {
				t.Errorf("data volume %+v, want the claim", v.VolumeSource)
			}
			if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("strategy %s: a second Pod could not mount the claim", dep.Spec.Strategy.Type)
			}
			r := container(t, &dep.Spec.Template.Spec, "redis")
			cmd := strings.Join(r.Args, " ")
			if !strings.Contains(cmd, "--appendonly yes") || !strings.Contains(cmd, `--requirepass "$REDIS_PASSWORD"`) {
				t.Errorf("redis-server %s: want an append-only file and the password", cmd)
			}
			if len(r.Env) != 1 || r.Env[0].ValueFrom == nil || r.Env[0].ValueFrom.SecretKeyRef.Name != "redis-auth" || r.Env[0].ValueFrom.SecretKeyRef.Key != "password" {
				t.Errorf("redis env %+v, want REDIS_PASSWORD from redis-auth/password", r.Env)
			}
			if v, _ := flag(webhookArgs(t, rel), "redis-password-file"); v != "/etc/qn-webhook/redis/password" {
				t.Errorf("the webhook reads no password: --redis-password-file=%s", v)
			}
		},
	},
}

func webhookArgs(t *testing.T, rel *chartrender.Release) []string {
	t.Helper()
	return container(t, &webhookDeployment(t, rel).Spec.Template.Spec, "qn-webhook").Args
}

// By default windows are exact across the chart's two replicas: they live
// in a bundled Redis that only the webhook Pods can reach, hardened like
// every other container, without persistence or password.
func TestDefaultWindowsAreSharedThroughTheBundledRedis(t *testing.T) {
	rel := render(t, "")
	args := webhookArgs(t, rel)
	want := map[string]string{"window-store": "redis", "redis-address": redisName + "." + releaseNS + ".svc:6379", "window-store-timeout": "250ms"}
	for f, v := range want {
		if got, _ := flag(args, f); got != v {
			t.Errorf("--%s=%q, want %q", f, got, v)
		}
	}
	if _, ok := flag(args, "redis-password-file"); ok {
		t.Error("a password file without a password Secret")
	}

	dep := get[appsv1.Deployment](t, rel, "Deployment", redisName)
	checkHardened(t, dep)
	if *dep.Spec.Replicas != 1 {
		t.Errorf("%d Redis replicas; the windows need one writer", *dep.Spec.Replicas)
	}
	if dep.Spec.Template.Spec.AutomountServiceAccountToken == nil || *dep.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("the Redis Pod mounts a service account token")
	}
	pod := dep.Spec.Template.Labels
	r := container(t, &dep.Spec.Template.Spec, "redis")
	cmd := strings.Join(r.Args, " ")
	for _, part := range []string{"--appendonly no", "--maxmemory 128mb", "--maxmemory-policy volatile-ttl", "--port 6379"} {
		if !strings.Contains(cmd, part) {
			t.Errorf("redis-server %s lacks %s", cmd, part)
		}
	}
	if strings.Contains(cmd, "requirepass") || len(r.Env) != 0 {
		t.Errorf("a password without a Secret: %s %+v", cmd, r.Env)
	}
	if v := volume(t, &dep.Spec.Template.Spec, "data"); v.EmptyDir == nil {
		t.Errorf("data volume %+v, want an emptyDir (no persistence by default)", v.VolumeSource)
	}
	if rel.Kinds()["PersistentVolumeClaim"] != 0 {
		t.Error("a claim without persistence")
	}

	svc := get[corev1.Service](t, rel, "Service", redisName)
	if !selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, pod) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 6379 {
		t.Errorf("Service %+v does not serve the Redis Pod on 6379", svc.Spec)
	}
	webhookPod := webhookDeployment(t, rel).Spec.Template.Labels
	if selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, webhookPod) {
		t.Error("the Redis Service selects webhook Pods")
	}

	np := get[networkingv1.NetworkPolicy](t, rel, "NetworkPolicy", redisName)
	if !selects(t, &np.Spec.PodSelector, pod) || len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 {
		t.Fatalf("NetworkPolicy %+v does not guard the Redis Pod with one rule", np.Spec)
	}
	from := np.Spec.Ingress[0].From[0]
	if from.PodSelector == nil || !selects(t, from.PodSelector, webhookPod) || from.NamespaceSelector != nil || from.IPBlock != nil {
		t.Errorf("Redis is reachable from %+v, want the webhook Pods only", from)
	}
	ctl := get[appsv1.Deployment](t, rel, "Deployment", fullname+"-controller").Spec.Template.Labels
	if selects(t, from.PodSelector, ctl) {
		t.Error("the controller may reach Redis")
	}
	if !strings.Contains(rel.Notes, "Rate windows are shared") || !strings.Contains(rel.Notes, "no persistence") {
		t.Errorf("NOTES do not describe the shared windows:\n%s", rel.Notes)
	}
}

func TestBadWindowValuesAreRefusedWithAClearMessage(t *testing.T) {
	for name, tc := range map[string]struct {
		values string
		want   []string
	}{
		"a store that does not exist":           {"windows: {store: etcd}", []string{"/windows/store", "'redis', 'memory'"}},
		"an address without a port":             {"windows: {redis: {address: redis.data.svc, bundled: {enabled: false}}}", []string{"/windows/redis/address", "does not match pattern"}},
		"a store deadline in minutes":           {"windows: {storeTimeout: 1m}", []string{"/windows/storeTimeout", "does not match pattern"}},
		"a maxmemory without a unit":            {"windows: {redis: {bundled: {maxMemory: '128'}}}", []string{"/windows/redis/bundled/maxMemory", "does not match pattern"}},
		"a misspelled key":                      {"windows: {redis: {adress: x:1}}", []string{"/windows/redis", "additional properties 'adress' not allowed"}},
		"a store deadline as long as the hook":  {"windows: {storeTimeout: 5s}", []string{"windows.storeTimeout (5s) must be shorter than webhook.timeoutSeconds (5s)"}},
		"an address and the bundled Redis":      {"windows: {redis: {address: 'r:6379'}}", []string{"windows.redis.address (r:6379) is set and windows.redis.bundled.enabled is true"}},
		"no Redis at all":                       {"windows: {redis: {bundled: {enabled: false}}}", []string{"windows.store is redis but there is no Redis"}},
		"TLS to the bundled Redis":              {"windows: {redis: {tls: {enabled: true}}}", []string{"windows.redis.tls.enabled needs your own Redis"}},
		"Sentinels and the bundled Redis":       {"windows: {redis: {sentinel: {addresses: ['s:26379'], masterName: m}}}", []string{"windows.redis.sentinel.addresses (s:26379) is set and windows.redis.bundled.enabled is true"}},
		"an address and Sentinels":              {"windows: {redis: {bundled: {enabled: false}, address: 'r:6379', sentinel: {addresses: ['s:26379'], masterName: m}}}", []string{"windows.redis.address (r:6379) and windows.redis.sentinel.addresses (s:26379) are all set"}},
		"Sentinels without the master's name":   {"windows: {redis: {bundled: {enabled: false}, sentinel: {addresses: ['s:26379']}}}", []string{`windows.redis.sentinel.addresses (s:26379) and windows.redis.sentinel.masterName ("") go together`}},
		"a master's name without Sentinels":     {"windows: {redis: {address: 'r:6379', bundled: {enabled: false}, sentinel: {masterName: m}}}", []string{"go together"}},
		"a Sentinel without a port":             {"windows: {redis: {bundled: {enabled: false}, sentinel: {addresses: [s], masterName: m}}}", []string{"/windows/redis/sentinel/addresses/0", "does not match pattern"}},
		"a cluster node without a port":         {"windows: {redis: {bundled: {enabled: false}, cluster: {addresses: ['c:6379', c]}}}", []string{"/windows/redis/cluster/addresses/1", "does not match pattern"}},
		"a Sentinel password without Sentinels": {"windows: {redis: {address: 'r:6379', bundled: {enabled: false}, sentinel: {passwordSecret: {name: x}}}}", []string{"windows.redis.sentinel.passwordSecret.name is set without windows.redis.sentinel.addresses"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := chartrender.Render(releaseName, releaseNS, values(t, tc.values))
			if err == nil {
				t.Fatalf("values %s were accepted", tc.values)
			}
			for _, part := range tc.want {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error lacks %q:\n%v", part, err)
				}
			}
		})
	}
}
