package roletable

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/rego"
	testharness "github.com/quantumnode/qn-admission/test/harness"
)

// loadRoleTable loads the bundled policies with roles.yaml edited by edit.
func loadRoleTable(t *testing.T, edit func(string) string) *policies.Set {
	t.Helper()
	dir := fstest.MapFS{}
	err := fs.WalkDir(rego.Bundled(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(rego.Bundled(), path)
		if path == policies.RolesFile {
			data = []byte(edit(string(data)))
		}
		dir[path] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	set, err := policies.Load(context.Background(), dir, policies.LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// qn-controller keeps the ValidatingAdmissionPolicy's parameters equal to
// the role table it serves: it writes them at start, rewrites them when
// the policies change, restores them when edited or deleted by hand, and
// writes nothing while they are right.
func TestEnvtestTheRoleTableFollowsThePolicies(t *testing.T) {
	t.Parallel()
	_, cfg := testharness.ControlPlane(t, testharness.ControlPlaneOptions{})
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	eventually := func(t *testing.T, what string, check func() error) {
		t.Helper()
		testharness.WaitFor(t, 30*time.Second, what, check)
	}
	name := fmt.Sprintf("qn-%d", time.Now().UnixNano())
	engine := policies.NewEngine(loadRoleTable(t, func(s string) string { return s }), policies.EngineOptions{})
	s := &Sync{Name: name, Engine: engine, Source: "test", Client: c, Reader: c, PollInterval: 50 * time.Millisecond, Resync: 500 * time.Millisecond, Logger: logr.Discard()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = c.Delete(context.Background(), &qnv1alpha1.QuantumNodeRoleTable{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	zones := func() ([]string, string, error) {
		rt := &qnv1alpha1.QuantumNodeRoleTable{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rt); err != nil {
			return nil, "", err
		}
		return rt.Spec.Roles["realtime"].Conditions.Labels[0].Values, rt.ResourceVersion, nil
	}
	want := func(what string, zone string) string {
		var rv string
		eventually(t, what, func() error {
			got, v, err := zones()
			if err != nil {
				return err
			}
			if strings.Join(got, ",") != zone {
				return fmt.Errorf("zones %v", got)
			}
			rv = v
			return nil
		})
		return rv
	}
	rv := want("the role table is written at start", "cn-shanghai")

	// Nothing is written while it is right (several resyncs pass).
	time.Sleep(1500 * time.Millisecond)
	if _, now, err := zones(); err != nil || now != rv {
		t.Fatalf("the unchanged role table was written again (resourceVersion %s, now %s): %v", rv, now, err)
	}

	engine.Swap(loadRoleTable(t, func(s string) string {
		return strings.Replace(s, "allowedZones: [cn-shanghai]", "allowedZones: [cn-shanghai, cn-beijing]", 1)
	}))
	want("a policy change is written", "cn-shanghai,cn-beijing")

	rt := &qnv1alpha1.QuantumNodeRoleTable{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rt); err != nil {
		t.Fatal(err)
	}
	realtime := rt.Spec.Roles["realtime"]
	realtime.Conditions.Labels[0].Values = []string{"anywhere"}
	rt.Spec.Roles["realtime"] = realtime
	if err := c.Update(context.Background(), rt); err != nil {
		t.Fatal(err)
	}
	want("a hand edit is undone", "cn-shanghai,cn-beijing")

	// A table beyond the parameters' limits does not compile: the stale
	// one is removed (the policy stands aside; the webhook judges by the
	// new table alone), and written again once the table compiles.
	var many []string
	for i := range 65 {
		many = append(many, fmt.Sprintf("user-%02d", i))
	}
	engine.Swap(loadRoleTable(t, func(s string) string {
		return strings.Replace(s, "requesters: {groups: [system:authenticated]}", "requesters: {users: ["+strings.Join(many, ", ")+"]}", 1)
	}))
	eventually(t, "a table that does not compile removes the stale one", func() error {
		if _, _, err := zones(); !kerrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	engine.Swap(loadRoleTable(t, func(s string) string {
		return strings.Replace(s, "allowedZones: [cn-shanghai]", "allowedZones: [cn-shanghai, cn-beijing]", 1)
	}))
	want("a table that compiles again is written again", "cn-shanghai,cn-beijing")
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rt); err != nil {
		t.Fatal(err)
	}

	if err := c.Delete(context.Background(), rt); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a deleted role table is written again", func() error {
		again := &qnv1alpha1.QuantumNodeRoleTable{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, again); err != nil {
			return err
		}
		if again.UID == rt.UID {
			return fmt.Errorf("not deleted yet")
		}
		if got := again.Spec.Roles["realtime"].Conditions.Labels[0].Values; strings.Join(got, ",") != "cn-shanghai,cn-beijing" {
			return fmt.Errorf("zones %v", got)
		}
		return nil
	})
}

// With a Helm release named, the table carries Helm's ownership marks,
// and a table written without them (by an older qn-controller) gets them:
// an upgrade whose chart renders the table itself then adopts it.
func TestEnvtestTheRoleTableCarriesHelmsOwnership(t *testing.T) {
	t.Parallel()
	_, cfg := testharness.ControlPlane(t, testharness.ControlPlaneOptions{})
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("qn-%d", time.Now().UnixNano())
	engine := policies.NewEngine(loadRoleTable(t, func(s string) string { return s }), policies.EngineOptions{})
	labels, annotations := HelmOwnership("qn-system", "qn-admission")
	s := &Sync{Name: name, Engine: engine, Source: "test", Client: c, Reader: c, PollInterval: 50 * time.Millisecond, Resync: 300 * time.Millisecond,
		Logger: logr.Discard(), Labels: labels, Annotations: annotations}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	t.Cleanup(func() {
		cancel()
		<-done
		_ = c.Delete(context.Background(), &qnv1alpha1.QuantumNodeRoleTable{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	marked := func() error {
		rt := &qnv1alpha1.QuantumNodeRoleTable{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rt); err != nil {
			return err
		}
		if rt.Labels["app.kubernetes.io/managed-by"] != "Helm" || rt.Annotations["meta.helm.sh/release-name"] != "qn-admission" || rt.Annotations["meta.helm.sh/release-namespace"] != "qn-system" {
			return fmt.Errorf("labels %v, annotations %v", rt.Labels, rt.Annotations)
		}
		return nil
	}
	// A table an older qn-controller wrote, without the marks.
	compiled, err := vap.Compile(engine.Current(), vap.Options{Name: name, Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), compiled.Params); err != nil {
		t.Fatal(err)
	}
	if marked() == nil {
		t.Fatal("the table written without marks has them")
	}
	go func() { done <- s.Start(ctx) }()
	testharness.WaitFor(t, 30*time.Second, "the stored table gets Helm's ownership marks", marked)
	if err := c.Delete(context.Background(), &qnv1alpha1.QuantumNodeRoleTable{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	testharness.WaitFor(t, 30*time.Second, "a table written anew carries them", marked)
}
