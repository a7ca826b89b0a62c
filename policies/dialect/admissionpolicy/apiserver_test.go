package admissionpolicy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/quantumnode/qn-admission/test/harness"
)

// agreementPolicies are ValidatingAdmissionPolicies with one binding each
// (the API server names the binding in its answers), using every part of
// a policy qn-admission judges: parameters by name from the request's
// namespace, variables, message expressions and reasons, match
// conditions, evaluation errors under Fail, audit annotations, the
// requester, a binding narrowed by an object selector, Warn.
const agreementPolicies = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: allowed-arch}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [qn.dev], apiVersions: ["*"], resources: [quantumnodes], operations: [CREATE, UPDATE]}
  variables:
  - name: arch
    expression: object.spec.hardware.arch
  validations:
  - expression: variables.arch in params.data.arches.split(',')
    messageExpression: "'arch ' + variables.arch + ' is not one of ' + params.data.arches"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: allowed-arch-by-namespace}
spec:
  policyName: allowed-arch
  validationActions: [Deny]
  paramRef: {name: arches, parameterNotFoundAction: Deny}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: arches, namespace: edge}
data: {arches: "arm64"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: arches, namespace: core}
data: {arches: "arm64,amd64"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: ports}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [qn.dev], apiVersions: ["*"], resources: [quantumnodes], operations: [CREATE]}
  matchConditions:
  - name: not-lab
    expression: "!has(object.metadata.labels) || !('tier' in object.metadata.labels) || object.metadata.labels.tier != 'lab'"
  validations:
  - expression: object.spec.services.all(s, s.port >= 1024)
    message: services listen on unprivileged ports
  - expression: "object.metadata.labels.team != ''"
    message: nodes name their team
  auditAnnotations:
  - key: ports
    valueExpression: "string(size(object.spec.services)) + ' services'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: ports-of-edge}
spec:
  policyName: ports
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: edge}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: core-tier}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [qn.dev], apiVersions: ["*"], resources: [quantumnodes], operations: ["*"]}
  validations:
  - expression: "'qn:operators' in request.userInfo.groups"
    messageExpression: "'only qn:operators place core nodes, not ' + request.userInfo.username"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: core-tier-warn}
spec:
  policyName: core-tier
  validationActions: [Warn]
  matchResources:
    objectSelector: {matchLabels: {tier: core}}
`

// TestAgreesWithTheAPIServer installs agreementPolicies into a real
// kube-apiserver and loads them here, then makes the same QuantumNode
// writes through both: the API server's answer (refused and its message;
// its warnings) is ours, for every write.
func TestAgreesWithTheAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver")
	}
	cluster, err := harness.StartCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	ctx := context.Background()
	for _, ns := range []string{"edge", "core"} {
		if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every authenticated user may write QuantumNodes: every refusal
	// the test meets is a policy's.
	if _, err := cluster.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "qn-editor"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"qn.dev"}, Resources: []string{"quantumnodes"}, Verbs: []string{"*"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "qn-editor"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "qn-editor"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:authenticated"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// UPDATEs of nodes stored before the policies: amd64 nodes, which
	// allowed-arch now refuses in edge; a tier label, a privileged port
	// (ports judges CREATE only), an empty team.
	stored := map[string]*unstructured.Unstructured{}
	for _, ns := range []string{"edge", "core"} {
		base := quantumNode("stored", map[string]string{"team": "ops"}, "amd64", 8883)
		base["metadata"].(map[string]any)["namespace"] = ns
		o, err := cluster.Dynamic.Resource(harness.QuantumNodes).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: base}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored[ns] = o
	}
	apply(t, cluster.Dynamic, agreementPolicies)
	pols := read(t, map[string]string{"policies.yaml": agreementPolicies})
	bindingOf := map[string]string{"allowed-arch": "allowed-arch-by-namespace", "ports": "ports-of-edge", "core-tier": "core-tier-warn"}

	type write struct {
		ns, user string
		groups   []string
		// obj is created, or replaces old (an UPDATE) when old is set.
		obj, old map[string]any
	}
	var writes []write
	i := 0
	for _, ns := range []string{"edge", "core"} {
		for _, arch := range []string{"arm64", "amd64"} {
			for _, labels := range []map[string]string{nil, {"team": "ops"}, {"tier": "lab"}, {"tier": "core", "team": ""}, {"tier": "core", "team": "ops"}} {
				for _, port := range []int64{80, 8883} {
					for _, who := range [][]string{{"alice", "qn:operators"}, {"bob"}} {
						i++
						o := quantumNode(fmt.Sprintf("n%d", i), labels, arch, port)
						o["metadata"].(map[string]any)["namespace"] = ns
						writes = append(writes, write{ns: ns, user: who[0], groups: who[1:], obj: o})
					}
				}
			}
		}
	}

	for _, ns := range []string{"edge", "core"} {
		stored := stored[ns]
		for _, change := range []func(o map[string]any){
			func(o map[string]any) { o["metadata"].(map[string]any)["labels"].(map[string]any)["team"] = "" },
			func(o map[string]any) { o["metadata"].(map[string]any)["labels"].(map[string]any)["tier"] = "core" },
			func(o map[string]any) {
				o["spec"].(map[string]any)["services"].([]any)[0].(map[string]any)["port"] = int64(80)
			},
		} {
			for _, who := range [][]string{{"alice", "qn:operators"}, {"bob"}} {
				updated := stored.DeepCopy().Object
				change(updated)
				writes = append(writes, write{ns: ns, user: who[0], groups: who[1:], obj: updated, old: stored.Object})
			}
		}
	}

	// answer is a write's outcome: refused with the API server's message,
	// and its warnings.
	type answer struct {
		refused  string
		warnings []string
	}
	apiServer := func(w write) answer {
		var warnings warningsOf
		cfg := rest.CopyConfig(cluster.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: w.user, Groups: w.groups}
		cfg.WarningHandler = &warnings
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes := dyn.Resource(harness.QuantumNodes).Namespace(w.ns)
		if w.old != nil {
			_, err = nodes.Update(ctx, &unstructured.Unstructured{Object: w.obj}, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		} else {
			_, err = nodes.Create(ctx, &unstructured.Unstructured{Object: w.obj}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}
		a := answer{warnings: warnings.list()}
		if err != nil {
			var status apierrors.APIStatus
			if !errors.As(err, &status) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				t.Fatalf("%s: not a policy's answer: %v", w.obj["metadata"].(map[string]any)["name"], err)
			}
			_, a.refused, _ = strings.Cut(status.Status().Message, "is forbidden: ")
			if a.refused == "" {
				a.refused = status.Status().Message
			}
		}
		return a
	}
	// ours are the messages the API server could give: it reports the
	// first refusal of its policies, in an order of its own.
	ours := func(w write) (refusals, warnings []string) {
		req := qnRequest("CREATE", w.obj, nil)
		if w.old != nil {
			req = qnRequest("UPDATE", w.obj, w.old)
		}
		req.Namespace, req.DryRun = w.ns, true
		req.UserInfo.Username, req.UserInfo.Groups = w.user, append(slices.Clone(w.groups), "system:authenticated")
		names := make([]string, 0, len(pols))
		for n := range pols {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			for _, f := range evaluate(pols[n], req) {
				if f.Warn {
					warnings = append(warnings, fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s", n, bindingOf[n], f.Message))
				} else {
					refusals = append(refusals, fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", n, bindingOf[n], f.Message))
				}
			}
		}
		return refusals, warnings
	}
	compare := func() error {
		var diffs []string
		refused, warned := 0, 0
		seen := map[string]int{}
		for _, w := range writes {
			a := apiServer(w)
			refusals, warnings := ours(w)
			name := fmt.Sprintf("%s/%s by %s", w.ns, w.obj["metadata"].(map[string]any)["name"], w.user)
			if w.old != nil {
				name = fmt.Sprintf("UPDATE of %s/%s to %v by %s", w.ns, "stored", w.obj["spec"], w.user)
			}
			switch {
			case a.refused == "" && len(refusals) > 0:
				diffs = append(diffs, fmt.Sprintf("%s: the API server admits, we refuse: %q", name, refusals))
			case a.refused != "" && !slices.Contains(refusals, a.refused):
				diffs = append(diffs, fmt.Sprintf("%s: the API server refuses %q, we say %q", name, a.refused, refusals))
			}
			// A refused write's warnings are those of the policies the
			// API server ran before refusing; compare admitted writes'.
			if a.refused == "" && !slices.Equal(a.warnings, warnings) {
				diffs = append(diffs, fmt.Sprintf("%s: the API server warns %q, we warn %q", name, a.warnings, warnings))
			}
			if a.refused != "" {
				refused++
				for _, what := range []string{"'allowed-arch'", "'ports'", "resulted in error"} {
					if strings.Contains(a.refused, what) {
						seen[what]++
					}
				}
			}
			if len(a.warnings) > 0 {
				warned++
			}
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%d of %d writes disagree:\n%s", len(diffs), len(writes), strings.Join(diffs, "\n"))
		}
		t.Logf("%d writes agree: %d refused (%v), %d warned", len(writes), refused, seen, warned)
		if len(seen) < 3 || warned == 0 {
			t.Errorf("the writes do not exercise every policy, an evaluation error and a warning: %v, %d warned", seen, warned)
		}
		return nil
	}
	// The API server's policies take a moment to become active.
	harness.WaitFor(t, 60*time.Second, "the API server's answers agree with ours", compare)
	if err := compare(); err != nil {
		t.Fatal(err)
	}
}

// warningsOf collects the warnings of one request.
type warningsOf struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningsOf) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warningsOf) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// apply creates every document of src in the cluster.
func apply(t *testing.T, dyn dynamic.Interface, src string) {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(src))
	for {
		var v map[string]any
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: jsonableForTest(v).(map[string]any)}
		gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
		if err != nil {
			t.Fatal(err)
		}
		resource := map[string]string{"ValidatingAdmissionPolicy": "validatingadmissionpolicies", "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings", "ConfigMap": "configmaps"}[u.GetKind()]
		ri := dyn.Resource(gv.WithResource(resource))
		var c dynamic.ResourceInterface = ri
		if ns := u.GetNamespace(); ns != "" {
			c = ri.Namespace(ns)
		}
		if _, err := c.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// jsonableForTest makes YAML's ints what unstructured objects hold.
func jsonableForTest(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonableForTest(e)
		}
	case []any:
		for i, e := range x {
			x[i] = jsonableForTest(e)
		}
	case int:
		return int64(x)
	}
	return v
}
