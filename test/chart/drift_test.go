package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/config/crd"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

const regenerate = "run `go generate ./test/chart/` to copy it again"

// The chart's crds/ holds exactly the project's CRD manifests, byte for
// byte: the chart cannot drift from config/crd.
func TestCRDIsTheProjectsOne(t *testing.T) {
	dir := filepath.Join(chartrender.Dir(), "crds")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	var want []string
	for _, m := range crd.Manifests() {
		want = append(want, m.FileName)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("crds/ holds %v, want exactly %v", names, want)
	}
	// And Helm installs them as those CRDs.
	rel := render(t, "")
	if len(rel.CRDs) != len(want) {
		t.Fatalf("Helm installs %d objects from crds/, want %d", len(rel.CRDs), len(want))
	}
	for i, m := range crd.Manifests() {
		got, err := os.ReadFile(filepath.Join(dir, m.FileName))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, m.YAML) {
			t.Fatalf("charts/qn-admission/crds/%s differs from config/crd/%s: %s", m.FileName, m.FileName, regenerate)
		}
		if rel.CRDs[i] != string(m.YAML) {
			t.Fatalf("Helm's crds/ object %d is not the manifest %s", i, m.FileName)
		}
	}
}

// files/policies, which the ConfigMap mode starts from, is exactly the
// policy directory built into qn-webhook.
func TestBundledPoliciesAreTheBinarysOwn(t *testing.T) {
	want := map[string][]byte{}
	err := fs.WalkDir(rego.Bundled(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		want[path], err = fs.ReadFile(rego.Bundled(), path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(chartrender.Dir(), "files", "policies")
	got := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if got[e.Name()], err = os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(keys(got), keys(want)) {
		t.Fatalf("charts/qn-admission/files/policies holds %v, rego/bundle %v: %s", keys(got), keys(want), regenerate)
	}
	for name := range want {
		if !bytes.Equal(got[name], want[name]) {
			t.Errorf("charts/qn-admission/files/policies/%s differs from rego/bundle/%s: %s", name, name, regenerate)
		}
	}
}

// What the chart's ConfigMap mode renders is a policy set qn-webhook loads:
// the role table validates, every module compiles and the Rego tests pass,
// with the user's overrides in place.
func TestConfigMapPoliciesLoad(t *testing.T) {
	roles, err := fs.ReadFile(rego.Bundled(), policies.RolesFile)
	if err != nil {
		t.Fatal(err)
	}
	// A user who only changes a parameter of the role table.
	custom := strings.Replace(string(roles), "allowedZones: [cn-shanghai]", "allowedZones: [cn-shanghai, cn-beijing]", 1)
	if custom == string(roles) {
		t.Fatal("the bundled roles.yaml changed shape; update this test's edit")
	}
	for name, tc := range map[string]struct {
		snippet string
		refused string // part of the error, or "" when the set loads
	}{
		"the bundled files": {"policies: {source: configMap}", ""},
		"a new zone in roles.yaml, the bundled tests dropped": {
			"policies: {source: configMap, configMap: {files: {roles.yaml: " + quote(custom) + ", roles_test.rego: ''}}}", ""},
		// The bundled Rego tests pin the bundled zones: qn-webhook refuses
		// such a set (and keeps serving the last good one), as documented.
		"a new zone in roles.yaml, the bundled tests kept": {
			"policies: {source: configMap, configMap: {files: {roles.yaml: " + quote(custom) + "}}}", "test_realtime_zone_must_be_allowed"},
	} {
		t.Run(name, func(t *testing.T) {
			snippet := tc.snippet
			rel := render(t, snippet)
			obj := rel.Find("ConfigMap", fullname+"-policies")
			if obj == nil {
				t.Fatal("no policy ConfigMap")
			}
			data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
			dir := fstest.MapFS{}
			for file, content := range data {
				dir[file] = &fstest.MapFile{Data: []byte(content)}
			}
			set, err := policies.Load(context.Background(), dir, policies.LoadOptions{})
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("want the set refused for %s, got %v", tc.refused, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("qn-webhook would refuse this ConfigMap: %v", err)
			}
			if _, ok := data["roles_test.rego"]; ok == strings.Contains(snippet, "roles_test.rego: ''") {
				t.Errorf("roles_test.rego present=%v with values %s", ok, snippet)
			}
			if got := set.Roles.Names(); !slices.Contains(got, "realtime") {
				t.Errorf("roles %v", got)
			}
			if strings.Contains(snippet, "roles.yaml") && data[policies.RolesFile] != custom {
				t.Errorf("the override did not replace roles.yaml")
			}
		})
	}
}

// The controller's ClusterRole and Role grant exactly the rules of
// config/rbac/role.yaml, which qn-controller's own tests prove sufficient by
// running it bound to them: nothing missing, nothing more. The Role sits in
// the release namespace, where the controller's Lease is.
func TestControllerRBACIsTheProjectsOne(t *testing.T) {
	source := filepath.Join(chartrender.Dir(), "..", "..", "config", "rbac", "role.yaml")
	data, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		role := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict([]byte(doc), role); err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		want[role.Kind] = append(want[role.Kind], ruleGrants(role.Rules)...)
	}
	if len(want["ClusterRole"]) == 0 || len(want["Role"]) == 0 {
		t.Fatalf("%s: want a ClusterRole and a Role, got %v", source, keys(want))
	}
	rel := render(t, "")
	for _, kind := range []string{"ClusterRole", "Role"} {
		role := only[rbacv1.ClusterRole](t, rel, kind)
		got := ruleGrants(role.Rules)
		slices.Sort(got)
		slices.Sort(want[kind])
		if !slices.Equal(got, want[kind]) {
			t.Errorf("the chart's %s grants\n  %v\nconfig/rbac/role.yaml's\n  %v", kind, got, want[kind])
		}
		if ns := role.Namespace; (kind == "Role") != (ns == releaseNS) {
			t.Errorf("%s %s in namespace %q", kind, role.Name, ns)
		}
	}
}

// ruleGrants expands rules into "group/resource[/name]:verb" strings.
func ruleGrants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, n := range names {
					for _, v := range r.Verbs {
						target := g + "/" + res
						if n != "" {
							target += "/" + n
						}
						out = append(out, target+":"+v)
					}
				}
			}
		}
	}
	return out
}

// quote makes a YAML scalar of s: a JSON string is one.
func quote(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}

// Deleting Cluster API Machines is granted only when asked for, in a role
// of its own, to the controller's ServiceAccount.
func TestMachineDeletionIsOptIn(t *testing.T) {
	name := fullname + "-controller-machines"
	if rel := render(t, ""); rel.Find("ClusterRole", name) != nil {
		t.Fatalf("ClusterRole %s rendered by default", name)
	}
	rel := render(t, `controller: {remediation: {deleteMachines: true}}`)
	role := rel.Find("ClusterRole", name)
	binding := rel.Find("ClusterRoleBinding", name)
	if role == nil || binding == nil {
		t.Fatalf("no ClusterRole and binding %s; kinds %v", name, rel.Kinds())
	}
	cr := decodeStrict[rbacv1.ClusterRole](t, role)
	if got := ruleGrants(cr.Rules); !slices.Equal(got, []string{"cluster.x-k8s.io/machines:get", "cluster.x-k8s.io/machines:delete"}) {
		t.Errorf("grants %v", got)
	}
	crb := decodeStrict[rbacv1.ClusterRoleBinding](t, binding)
	if len(crb.Subjects) != 1 || crb.Subjects[0].Name != fullname+"-controller" || crb.Subjects[0].Namespace != releaseNS {
		t.Errorf("subjects %+v", crb.Subjects)
	}
}
