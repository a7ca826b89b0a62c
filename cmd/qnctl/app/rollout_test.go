package app

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/config/crd"
	"github.com/quantumnode/qn-admission/controller/rollout"
)

// TestRolloutHistoryAndUndoAgainstALiveCluster lists the revisions
// qn-controller recorded (made here as it makes them) and rolls back,
// against a real kube-apiserver through a kubeconfig, as a user would.
func TestRolloutHistoryAndUndoAgainstALiveCluster(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is empty: this test needs a real kube-apiserver and etcd. " +
			"Run it with `make test`, or `export KUBEBUILDER_ASSETS=$(./hack/k8s-bins.sh)` first")
	}
	ours, err := crd.All()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{CRDs: ours}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = qnv1alpha1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}}); err != nil {
		t.Fatal(err)
	}
	qn := &qnv1alpha1.QuantumNode{
		ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "edge-1", Annotations: map[string]string{rollout.AnnotationChangeCause: "move grpc to 9999"}},
		Spec:       qnv1alpha1.QuantumNodeSpec{Hardware: qnv1alpha1.Hardware{Arch: qnv1alpha1.ArchARM64}, Services: []qnv1alpha1.Service{{Name: "grpc", Port: 9999}}},
	}
	if err := c.Create(ctx, qn); err != nil {
		t.Fatal(err)
	}
	before := qn.DeepCopy()
	before.Spec.Services[0].Port = 9090
	before.Annotations = nil
	first, current := rollout.NewRevision(before, 1), rollout.NewRevision(qn, 2)
	for _, r := range []client.Object{first, current} {
		if err := c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	qn.Status.Rollout = &qnv1alpha1.RolloutStatus{CurrentRevision: current.Name, ReadyRevision: first.Name}
	if err := c.Status().Update(ctx, qn); err != nil {
		t.Fatal(err)
	}
	path := adminKubeconfig(t, env, "operator")
	kc := []string{"--kubeconfig", path, "-n", "lab"}

	code, out, errOut := run(t, "", append([]string{"rollout", "history", "edge-1"}, kc...)...)
	if code != exitOK {
		t.Fatalf("history: exit %d: %s", code, errOut)
	}
	want := "QuantumNode lab/edge-1\n" +
		"REVISION  SERVICES   STATUS      CHANGE-CAUSE\n" +
		"1         grpc:9090  last Ready  <none>\n" +
		"2         grpc:9999  current     move grpc to 9999\n"
	if out != want {
		t.Errorf("history:\n%s\nwant:\n%s", out, want)
	}
	code, out, _ = run(t, "", append([]string{"rollout", "history", "edge-1", "--revision", "1"}, kc...)...)
	if code != exitOK || !strings.Contains(out, "# revision 1 ("+first.Name+")") || !strings.Contains(out, "port: 9090") {
		t.Errorf("history --revision 1: exit %d\n%s", code, out)
	}
	cases := map[string]struct {
		args    []string
		code    int
		message string
	}{
		"a revision that does not exist":         {args: []string{"history", "edge-1", "--revision", "5"}, code: exitBadInput, message: "QuantumNode lab/edge-1 has no revision 5"},
		"undo to a revision that does not exist": {args: []string{"undo", "edge-1", "--to-revision", "7"}, code: exitBadInput, message: "has no revision 7; `qnctl rollout history` lists them"},
		"undo to the current revision":           {args: []string{"undo", "edge-1", "--to-revision", "2"}, code: exitBadInput, message: "is at revision 2 already"},
		"a node that does not exist":             {args: []string{"undo", "edge-9"}, code: exitBadInput, message: "QuantumNode lab/edge-9 not found"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, _, errOut := run(t, "", append(append([]string{"rollout"}, tc.args...), kc...)...)
			if code != tc.code || !strings.Contains(errOut, tc.message) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, tc.code, tc.message)
			}
		})
	}

	code, out, errOut = run(t, "", append([]string{"rollout", "undo", "edge-1"}, kc...)...)
	if code != exitOK || !strings.Contains(out, "QuantumNode lab/edge-1 rolled back: revision 2 → 1 (rb-manual-") {
		t.Fatalf("undo: exit %d\n%s%s", code, out, errOut)
	}
	stored := &qnv1alpha1.QuantumNode{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(qn), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Spec.Services[0].Port != 9090 || !strings.Contains(stored.Annotations[qnv1alpha1.AnnotationRollback], `"toRevision":1`) {
		t.Errorf("after undo: spec %+v, annotations %v", stored.Spec, stored.Annotations)
	}
	if !slices.ContainsFunc(stored.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return m.Manager == rolloutFieldManager }) {
		t.Errorf("no managedFields entry of %s", rolloutFieldManager)
	}
}

// adminKubeconfig is a kubeconfig file for user, a cluster admin of env's
// control plane, as a person running qnctl holds one.
func adminKubeconfig(t *testing.T, env *envtest.Environment, user string) string {
	t.Helper()
	u, err := env.ControlPlane.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
