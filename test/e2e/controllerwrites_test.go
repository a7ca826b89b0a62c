package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/controller/rollout"
	"github.com/quantumnode/qn-admission/test/harness"
)

// controllerUser is qn-controller's ServiceAccount as the chart names it
// in qn-system (release qn-admission), as the API server authenticates it.
const controllerUser = "system:serviceaccount:qn-system:qn-admission-controller"

// asController is a client that acts as qn-controller's ServiceAccount,
// bound to exactly config/rbac's ClusterRole.
func asController(t *testing.T) client.Client {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(harness.ModuleRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal([]byte(strings.Split(string(data), "\n---\n")[0]), role); err != nil {
		t.Fatal(err)
	}
	role.ObjectMeta = metav1.ObjectMeta{Name: "qn-e2e-controller"}
	if _, err := cluster.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "qn-e2e-controller"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "qn-system", Name: "qn-admission-controller"}},
	}
	if _, err := cluster.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c, err := client.New(impersonatingConfig(controllerUser, "system:serviceaccounts", "system:serviceaccounts:qn-system"), client.Options{Scheme: mustScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTheControllersRollbackPassesTheBundledRoleTable runs qn-controller's
// one write of a QuantumNode's spec, an automatic rollback (a merge patch
// under its own field manager, rollout.Apply), as its ServiceAccount through
// the real API server and webhook with the bundled policies: the default
// and realtime roles admit it (the ServiceAccount is among realtime's
// requesters through system:authenticated, so no warning either); batch
// nodes may not be updated by anyone, so their rollback is refused with
// the role's reason, which the controller reports as RollbackFailed.
func TestTheControllersRollbackPassesTheBundledRoleTable(t *testing.T) {
	registered(t)
	ctx := context.Background()
	admin, err := client.New(cluster.Config, client.Options{Scheme: mustScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctl := asController(t)
	nodes := map[string]*qnv1alpha1.QuantumNode{
		"default": {ObjectMeta: metav1.ObjectMeta{Name: "rollback-default"}},
		"realtime": {ObjectMeta: metav1.ObjectMeta{Name: "rollback-realtime",
			Annotations: map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "20"},
			Labels:      map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"}}},
		"batch": {ObjectMeta: metav1.ObjectMeta{Name: "rollback-batch",
			Annotations: map[string]string{"qn-role": "batch"}, Labels: map[string]string{"priority": "low"}}},
	}
	for role, qn := range nodes {
		qn.Namespace = namespace
		qn.Spec = qnv1alpha1.QuantumNodeSpec{Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64}, Services: []qnv1alpha1.Service{{Name: "grpc", Port: 9999}}}
		if err := admin.Create(ctx, qn); err != nil {
			t.Fatalf("create the %s node: %v", role, err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), qn) })
	}
	previous := rollout.Snapshot{Spec: rollout.SnapshotSpec{Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64}, Services: []qnv1alpha1.Service{{Name: "grpc", Port: 9090}}}}
	for role, qn := range nodes {
		t.Run(role, func(t *testing.T) {
			rec := qnv1alpha1.RollbackRecord{ID: "rb-e2e-" + role, FromRevision: 2, ToRevision: 1, Trigger: "test", Performed: true, At: metav1.NewTime(time.Now())}
			err := rollout.Apply(ctx, ctl, qn, previous, rec, rollout.RollbackFieldManager)
			if role == "batch" {
				if !apierrors.IsForbidden(err) || !Contains(err, `role "batch", which may not update it`) {
					t.Fatalf("the rollback of a batch node: %v, want the role table's refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("the controller's rollback of a %s node is refused: %v", role, err)
			}
			stored := &qnv1alpha1.QuantumNode{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(qn), stored); err != nil {
				t.Fatal(err)
			}
			if stored.Spec.Services[0].Port != 9090 || !strings.Contains(stored.Annotations[qnv1alpha1.AnnotationRollback], rec.ID) {
				t.Errorf("stored spec %+v, annotations %v", stored.Spec, stored.Annotations)
			}
			var manager string
			for _, m := range stored.ManagedFields {
				if m.Manager == rollout.RollbackFieldManager {
					manager = m.Manager
				}
			}
			if manager == "" {
				t.Errorf("no managedFields entry of %s", rollout.RollbackFieldManager)
			}
		})
	}
}

func mustScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
