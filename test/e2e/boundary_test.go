package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Roles are a security boundary through the real apiserver: the stored
// object's role judges UPDATE and DELETE, the control plane always deletes,
// requesters guard who may pick a role, a full window tells the client when
// to retry, and the audit log records every decision.

func batchQN(name string) *unstructured.Unstructured {
	o := qn(name, "amd64", svc("job", 9000))
	o.SetAnnotations(map[string]string{"qn-role": "batch"})
	o.SetLabels(map[string]string{"priority": "low"})
	return o
}

func TestDeletingANamespaceWithRealtimeBatchAndDefaultNodesCompletes(t *testing.T) {
	registered(t)
	if err := cluster.StartControllerManager(); err != nil {
		t.Fatalf("%v\n%s", err, cluster.ControllerManagerLogs())
	}
	ctx := context.Background()
	ns := "doomed"
	if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*unstructured.Unstructured{realtimeQN("rt"), batchQN("batch"), qn("plain", "arm64", svc("mqtt", 8883))} {
		if _, err := createQN(ctx, cluster.Dynamic, ns, o, false); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	// An ordinary user may not delete the realtime node: the webhook does
	// judge deletions, so what follows is not an open door.
	bob := impersonating(t, "bob", "qn:developers")
	err := bob.Resource(harness.QuantumNodes).Namespace(ns).Delete(ctx, "rt", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !Contains(err, `may not delete a QuantumNode of role "realtime": roles.realtime.delete admits groups system:masters`) {
		t.Fatalf("an ordinary user deleting a realtime node: want our 403, got %v", err)
	}

	start := time.Now()
	if err := cluster.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = harness.Eventually(ctx, 120*time.Second, func() error {
		got, err := cluster.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("namespace %s is %s: %+v", ns, got.Status.Phase, got.Status.Conditions)
	})
	if err != nil {
		t.Fatalf("the namespace never finished deleting: %v\nkube-controller-manager:\n%s", err, cluster.ControllerManagerLogs())
	}
	t.Logf("namespace %s with realtime, batch and default nodes deleted in %s", ns, time.Since(start).Round(time.Millisecond))
	if !logsEventuallyContain(ctx, webhook, `"exempt":"control plane: system:serviceaccount:kube-system:namespace-controller deletes for the cluster"`) {
		t.Errorf("the decision log shows no deletion by the namespace controller; it was admitted some other way")
	}
}

func TestOwnerGarbageCollectionDeletesARealtimeNode(t *testing.T) {
	registered(t)
	if err := cluster.StartControllerManager(); err != nil {
		t.Fatalf("%v\n%s", err, cluster.ControllerManagerLogs())
	}
	ctx := context.Background()
	owner, err := cluster.Kube.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gc-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := realtimeQN("gc-owned")
	o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}})
	if _, err := createQN(ctx, cluster.Dynamic, namespace, o, false); err != nil {
		t.Fatal(err)
	}
	background := metav1.DeletePropagationBackground
	if err := cluster.Kube.CoreV1().ConfigMaps(namespace).Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	err = harness.Eventually(ctx, 90*time.Second, func() error {
		_, err := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace).Get(ctx, "gc-owned", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the owned realtime node is still there (%v)", err)
	})
	if err != nil {
		t.Fatalf("%v\nkube-controller-manager:\n%s", err, cluster.ControllerManagerLogs())
	}
	if !logsEventuallyContain(ctx, webhook, `"exempt":"control plane: system:serviceaccount:kube-system:generic-garbage-collector deletes for the cluster"`) {
		t.Errorf("the decision log shows no deletion by the garbage collector")
	}
}

func TestRemovingOrChangingTheRoleDoesNotEscapeIt(t *testing.T) {
	registered(t)
	ctx := context.Background()
	nodes := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(namespace)
	if _, err := createQN(ctx, cluster.Dynamic, namespace, batchQN("escape-batch"), false); err != nil {
		t.Fatal(err)
	}
	got, err := nodes.Get(ctx, "escape-batch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.SetAnnotations(nil)
	_, err = nodes.Update(ctx, got, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !Contains(err, `the stored QuantumNode is under role "batch", which may not update it (it may CREATE); removing or changing the qn-role annotation does not change the role that judges an update`) {
		t.Fatalf("dropping qn-role from a batch node: want our 403 naming batch, got %v", err)
	}

	if _, err := createQN(ctx, cluster.Dynamic, namespace, realtimeQN("escape-rt"), false); err != nil {
		t.Fatal(err)
	}
	out, err := cluster.RunKubectl(ctx, "", "annotate", "-n", namespace, "quantumnode", "escape-rt", "qn-role=default", "--overwrite")
	want := `the stored QuantumNode is under role "realtime", which does not let it move to role "default" (roles.realtime.moveTo lists none)`
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("kubectl annotate qn-role=default on a realtime node: want %q, got %v:\n%s", want, err, out)
	}
	t.Logf("kubectl printed:\n%s", out)

	// A default node may be promoted: then realtime's policies judge it.
	plain := qn("promote-me", "arm64", svc("mqtt", 8883))
	if _, err := createQN(ctx, cluster.Dynamic, namespace, plain, false); err != nil {
		t.Fatal(err)
	}
	out, err = cluster.RunKubectl(ctx, "", "annotate", "-n", namespace, "quantumnode", "promote-me", "qn-role=realtime")
	if err == nil || !strings.Contains(out, `denied by qn-admission (role "realtime")`) {
		t.Fatalf("promoting a node without a zone into realtime is judged by realtime: got %v:\n%s", err, out)
	}
}

func TestRequestersGuardWhoMayPickARole(t *testing.T) {
	registered(t)
	ctx := context.Background()
	rolesFile := filepath.Join(policyDir, "roles.yaml")
	original, err := os.ReadFile(rolesFile)
	if err != nil {
		t.Fatal(err)
	}
	guarded := strings.Replace(string(original), "    requesters: {groups: [system:authenticated]}\n    delete: {groups: [system:masters]}\n    window: {limit: 120",
		"    requesters: {groups: [qn:realtime-operators], serviceAccounts: [\"qn-system:deployer\"]}\n    delete: {groups: [system:masters]}\n    window: {limit: 120", 1)
	if guarded == string(original) {
		t.Fatal("could not find realtime's requesters in roles.yaml")
	}
	t.Cleanup(func() {
		_ = os.WriteFile(rolesFile, original, 0o644)
		waitForReload(t, func(ready string) bool { return !strings.Contains(ready, "failed") })
	})
	before, _ := webhook.Readiness()
	before = policiesCheck(before)
	if err := os.WriteFile(rolesFile, []byte(guarded), 0o644); err != nil {
		t.Fatal(err)
	}
	waitForReload(t, func(ready string) bool { return ready != before })

	bob := impersonating(t, "bob", "qn:developers")
	_, err = createQN(ctx, bob, namespace, realtimeQN("picked-by-bob"), false)
	want := `user "bob" (groups qn:developers, system:authenticated) may not create QuantumNodes under role "realtime": roles.realtime.requesters admits only groups qn:realtime-operators; service accounts qn-system:deployer`
	if !apierrors.IsForbidden(err) || !Contains(err, want) {
		t.Fatalf("a developer picking realtime: want %q, got %v", want, err)
	}
	carol := impersonating(t, "carol", "qn:realtime-operators")
	if _, err := createQN(ctx, carol, namespace, realtimeQN("picked-by-carol"), false); err != nil {
		t.Fatalf("an operator picks realtime: %v", err)
	}
	deployer := impersonating(t, "system:serviceaccount:qn-system:deployer", "system:serviceaccounts")
	if _, err := createQN(ctx, deployer, namespace, realtimeQN("picked-by-deployer"), false); err != nil {
		t.Fatalf("the listed service account picks realtime: %v", err)
	}
}

func TestAFullWindowTellsTheClientWhenToRetry(t *testing.T) {
	registered(t)
	ctx := context.Background()
	// dave's realtime window, filled with 120 changes inside one minute.
	dave := impersonating(t, "dave", "qn:realtime-operators")
	start := time.Now()
	for i := 1; i <= 120; i++ {
		if _, err := createQN(ctx, dave, namespace, realtimeQN(fmt.Sprintf("dave-%03d", i)), false); err != nil {
			t.Fatalf("change %d of 120: %v", i, err)
		}
	}
	// The 121st through a plain HTTP client, so nothing retries for us.
	cfg := impersonatingConfig("dave", "qn:realtime-operators")
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(realtimeQN("dave-121").Object)
	url := base.JoinPath("apis", harness.QuantumNodes.Group, harness.QuantumNodes.Version, "namespaces", namespace, harness.QuantumNodes.Resource)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url.String(), strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if elapsed := time.Since(start); elapsed > 55*time.Second {
		t.Skipf("121 changes took %s, more than one window: the check proves nothing on a machine this slow", elapsed)
	}
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || err != nil || retry < 1 || retry > 60 {
		t.Fatalf("the 121st change: want 429 with Retry-After 1..60, got %d Retry-After %q:\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), msg)
	}
	if !strings.Contains(string(msg), `"retryAfterSeconds":`+strconv.Itoa(retry)) || !strings.Contains(string(msg), `rate window full: role \"realtime\" allows 120 changes per 1m0s per user`) {
		t.Fatalf("the status carries the retry time and our message:\n%s", msg)
	}
	t.Logf("121st change: %d, Retry-After: %ds", resp.StatusCode, retry)
}

func TestTheAuditLogRecordsTheDecision(t *testing.T) {
	registered(t)
	ctx := context.Background()
	if _, err := createQN(ctx, cluster.Dynamic, namespace, qn("audited", "arm64", svc("mqtt", 8883)), false); err != nil {
		t.Fatal(err)
	}
	const prefix = "validate.qn-admission.qn.dev/"
	var found map[string]string
	err := harness.Eventually(ctx, 20*time.Second, func() error {
		f, err := os.Open(cluster.AuditLog)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var ev struct {
				Verb        string                `json:"verb"`
				Stage       string                `json:"stage"`
				ObjectRef   struct{ Name string } `json:"objectRef"`
				Annotations map[string]string     `json:"annotations"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Verb == "create" && ev.ObjectRef.Name == "audited" && ev.Stage == "ResponseComplete" {
				found = ev.Annotations
				return nil
			}
		}
		return fmt.Errorf("no audit event for the create of %q yet", "audited")
	})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"role": "default", "decision": "allowed"} {
		if found[prefix+key] != want {
			t.Errorf("audit annotation %s%s = %q, want %q (all: %v)", prefix, key, found[prefix+key], want, found)
		}
	}
	if !strings.HasPrefix(found[prefix+"revision"], "sha256:") || !strings.Contains(found[prefix+"window"], "/600 per 60s by user") {
		t.Errorf("audit annotations lack the revision or the window: %v", found)
	}
}

var (
	rbacOnce sync.Once
	rbacErr  error // the binding never reached the authorizer
)

// impersonatingConfig is the admin's config acting as user in groups; the
// apiserver adds system:authenticated.
func impersonatingConfig(user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	cfg.QPS, cfg.Burst = 500, 500
	return cfg
}

// impersonating is a client acting as user, allowed by RBAC to write
// QuantumNodes, so every refusal it meets is the webhook's.
func impersonating(t *testing.T, user string, groups ...string) dynamic.Interface {
	t.Helper()
	rbacOnce.Do(func() {
		ctx := context.Background()
		_, _ = cluster.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "qn-e2e-editor"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"qn.dev"}, Resources: []string{"quantumnodes"}, Verbs: []string{"*"}}},
		}, metav1.CreateOptions{})
		_, _ = cluster.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "qn-e2e-editor"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "qn-e2e-editor"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:authenticated"}},
		}, metav1.CreateOptions{})
		// The API server's RBAC authorizer reads bindings from its own
		// cache: until the binding reaches it, the first request gets
		// RBAC's 403 instead of the webhook's.
		rbacErr = harness.Eventually(ctx, 30*time.Second, func() error {
			review, err := cluster.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:               "rbac-probe",
					Groups:             []string{"system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "qn.dev", Resource: "quantumnodes", Verb: "delete", Namespace: "default"},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !review.Status.Allowed {
				return fmt.Errorf("the API server's authorizer does not yet allow writing QuantumNodes: %s", review.Status.Reason)
			}
			return nil
		})
	})
	if rbacErr != nil {
		t.Fatal(rbacErr)
	}
	dyn, err := dynamic.NewForConfig(impersonatingConfig(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// waitForReload waits until the policies line of /readyz?verbose
// satisfies done (the policy directory was reloaded, or a broken change
// reported) and returns the whole page.
func waitForReload(t *testing.T, done func(ready string) bool) string {
	t.Helper()
	var ready string
	err := harness.Eventually(context.Background(), 20*time.Second, func() error {
		var err error
		ready, err = webhook.Readiness()
		if err != nil || !done(policiesCheck(ready)) {
			return fmt.Errorf("not reloaded yet: %v %s", err, ready)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ready
}

// policiesCheck is the policies line of /readyz?verbose: other checks
// (the window store's call counts) change with every request.
func policiesCheck(ready string) string {
	for _, line := range strings.Split(ready, "\n") {
		if strings.Contains(line, "]policies ") {
			return line
		}
	}
	return ready
}

// logsEventuallyContain reports whether the webhook's output holds want
// within 5 seconds: decision lines are written together, a few
// milliseconds after their answers (--decision-log-flush-interval).
func logsEventuallyContain(ctx context.Context, webhook interface{ Logs() string }, want string) bool {
	return harness.Eventually(ctx, 5*time.Second, func() error {
		if !strings.Contains(webhook.Logs(), want) {
			return fmt.Errorf("no %s in the logs", want)
		}
		return nil
	}) == nil
}
