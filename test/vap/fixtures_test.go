package vap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/quantumnode/qn-admission/policies/vap"
	"github.com/quantumnode/qn-admission/test/harness"
)

// fixtureFile is the part of qnctl's fixture format (cmd/qnctl/app/
// fixtures.go) a replay through the API server needs. It decodes strictly:
// a field the fixtures gain fails here, not silently.
type fixtureFile struct {
	Defaults fixtureInput  `yaml:"defaults"`
	Cases    []fixtureCase `yaml:"cases"`
}

type fixtureInput struct {
	Object      map[string]any `yaml:"object"`
	Review      map[string]any `yaml:"review"`
	File        string         `yaml:"file"`
	Old         map[string]any `yaml:"old"`
	Operation   string         `yaml:"operation"`
	User        *string        `yaml:"user"`
	Groups      []string       `yaml:"groups"`
	Namespace   string         `yaml:"namespace"`
	Role        string         `yaml:"role"`
	Time        string         `yaml:"time"`
	WindowCount *int           `yaml:"windowCount"`
	DryRun      *bool          `yaml:"dryRun"`
}

type fixtureCase struct {
	Name         string `yaml:"name"`
	fixtureInput `yaml:",inline"`
	// Expect is checked only for allowed.
	Expect map[string]any `yaml:"expect"`
}

// replayed is one fixture case as a request to the API server.
type replayed struct {
	file, name    string
	op            string
	user          string
	groups        []string
	namespace     string
	object        *unstructured.Unstructured // CREATE and UPDATE
	stored        *unstructured.Unstructured // UPDATE and DELETE
	windowCount   int
	expectAllowed *bool
	// skip says why the case is no request a client can send.
	skip string
}

// loadFixtures reads the bundled policies' fixture cases and turns each
// into a request as qnctl builds it: CREATE unless old is given (UPDATE)
// or operation says otherwise; role sets qn-role on the object (on the
// stored one for DELETE, whose object is the one deleted); user, groups and
// namespace as qnctl defaults them. Each case gets a name of its own.
func loadFixtures(t *testing.T) []*replayed {
	t.Helper()
	dir := filepath.Join(harness.ModuleRoot(), "test", "fixtures", "bundled")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixture files in %s: %v", dir, err)
	}
	var out []*replayed
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var f fixtureFile
		dec := yaml.NewDecoder(bytes.NewReader(src))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("%s: %v (the replay reads a subset of qnctl's fixture format; extend it)", file, err)
		}
		for i, c := range f.Cases {
			out = append(out, replay(t, filepath.Base(file), fmt.Sprintf("fx-%s-%02d", strings.TrimSuffix(filepath.Base(file), ".yaml"), i), c, f.Defaults))
		}
	}
	return out
}

func replay(t *testing.T, file, name string, c fixtureCase, d fixtureInput) *replayed {
	in := c.fixtureInput
	if in.Object == nil && in.Review == nil && in.File == "" {
		in.Object, in.Review, in.File = d.Object, d.Review, d.File
	}
	if in.Old == nil {
		in.Old = d.Old
	}
	if in.Operation == "" {
		in.Operation = d.Operation
	}
	if in.Namespace == "" {
		in.Namespace = d.Namespace
	}
	if in.Role == "" {
		in.Role = d.Role
	}
	if in.User == nil {
		in.User = d.User
	}
	if in.Groups == nil {
		in.Groups = d.Groups
	}
	if in.WindowCount == nil {
		in.WindowCount = d.WindowCount
	}
	r := &replayed{file: file, name: c.Name, user: "qnctl", groups: []string{"system:authenticated"}}
	if allowed, ok := c.Expect["allowed"].(bool); ok {
		r.expectAllowed = &allowed
	}
	if in.User != nil {
		r.user = *in.User
	}
	if in.Groups != nil {
		r.groups = in.Groups
	}
	if in.WindowCount != nil {
		r.windowCount = *in.WindowCount
	}
	switch {
	case in.File != "" || in.Review != nil:
		r.skip = "a crafted AdmissionReview, not a request a client can send"
		return r
	case in.Object["kind"] != "QuantumNode":
		r.skip = "another kind: neither the policy nor the webhook's QuantumNode rules judge it"
		return r
	}
	obj := &unstructured.Unstructured{Object: jsonObject(t, in.Object)}
	r.namespace = in.Namespace
	if r.namespace == "" {
		r.namespace = obj.GetNamespace()
	}
	if r.namespace == "" {
		r.namespace = "default"
	}
	r.op = strings.ToUpper(in.Operation)
	if r.op == "" {
		r.op = "CREATE"
		if in.Old != nil {
			r.op = "UPDATE"
		}
	}
	if in.Role != "" {
		setAnnotation(obj, "qn-role", in.Role)
	}
	prepare := func(o *unstructured.Unstructured) *unstructured.Unstructured {
		o.SetName(name)
		o.SetNamespace(r.namespace)
		return o
	}
	switch r.op {
	case "CONNECT":
		r.skip = "CONNECT, which QuantumNodes do not serve"
	case "DELETE":
		r.stored = prepare(obj)
	case "UPDATE":
		if in.Old == nil {
			r.skip = "an UPDATE without the stored object, which the API server always sends"
			return r
		}
		r.object = prepare(obj)
		r.stored = prepare(&unstructured.Unstructured{Object: jsonObject(t, in.Old)})
	default:
		r.object = prepare(obj)
	}
	return r
}

// jsonObject is a YAML-decoded object as the API machinery holds one
// (integers int64).
func jsonObject(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := utiljson.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func setAnnotation(o *unstructured.Unstructured, key, value string) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	o.SetAnnotations(a)
}

// send makes the request as its user, a dry run: judged by every admission
// step, stored nowhere, and counted in no rate window.
func (r *replayed) send(t *testing.T) error {
	t.Helper()
	ctx := context.Background()
	api := nodes(as(t, r.user, r.groups...), r.namespace)
	dry := []string{metav1.DryRunAll}
	switch r.op {
	case "CREATE":
		_, err := api.Create(ctx, r.object.DeepCopy(), metav1.CreateOptions{DryRun: dry})
		return err
	case "UPDATE":
		stored, err := nodes(cluster.Dynamic, r.namespace).Get(ctx, r.stored.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: the stored object: %v", r.name, err)
		}
		o := r.object.DeepCopy()
		o.SetResourceVersion(stored.GetResourceVersion())
		_, err = api.Update(ctx, o, metav1.UpdateOptions{DryRun: dry})
		return err
	default:
		return api.Delete(ctx, r.stored.GetName(), metav1.DeleteOptions{DryRun: dry})
	}
}

// answer is how the API server answered, and who refused.
type answer struct {
	allowed bool
	by      string // "policy", "webhook", "CRD", or the error
}

func answerOf(err error) answer {
	switch {
	case err == nil:
		return answer{allowed: true}
	case strings.Contains(err.Error(), fmt.Sprintf("ValidatingAdmissionPolicy '%s'", vap.DefaultName)):
		return answer{by: "policy"}
	case strings.Contains(err.Error(), `admission webhook "validate.`+registration):
		return answer{by: "webhook"}
	case apierrors.IsInvalid(err):
		return answer{by: "CRD"}
	default:
		return answer{by: err.Error()}
	}
}

// Every fixture case of the bundled policies, sent through the API server
// as the client it names, gets the same answer from the webhook and the
// policy together as from the webhook alone: the policy adds no refusal
// the webhook would not make.
func TestEveryFixtureGetsTheSameAnswerWithThePolicy(t *testing.T) {
	waitForPolicy(t)
	ctx := context.Background()
	cases := loadFixtures(t)

	// The stored objects of UPDATE and DELETE cases are written while
	// nothing judges them (as if they predate the rules), then the webhook
	// and the policy come back.
	unregister(t)
	var skipped []string
	for _, r := range cases {
		if r.skip != "" || r.stored == nil {
			continue
		}
		if _, err := nodes(cluster.Dynamic, r.namespace).Create(ctx, r.stored.DeepCopy(), metav1.CreateOptions{}); err != nil {
			if !apierrors.IsInvalid(err) {
				t.Fatalf("%s: store %s: %v", r.name, r.stored.GetName(), err)
			}
			r.skip = "its stored object is no valid QuantumNode (the CRD refuses to store it)"
		}
	}
	if err := startWebhook(ctx); err != nil {
		t.Fatal(err)
	}
	if err := applyPolicy(ctx, "--mode", "enforce"); err != nil {
		t.Fatal(err)
	}
	waitForPolicy(t)
	waitForWebhook(t)

	withPolicy := map[*replayed]answer{}
	for _, r := range cases {
		if r.skip == "" {
			withPolicy[r] = answerOf(r.send(t))
		}
	}
	// The webhook alone: the binding removed.
	if out, err := cluster.RunKubectl(ctx, "", "delete", "validatingadmissionpolicybinding", vap.DefaultName); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := applyPolicy(context.Background(), "--mode", "enforce"); err != nil {
			t.Error(err)
		}
	})
	harness.WaitFor(t, 60*time.Second, "the webhook alone to answer", func() error {
		o := qn("probe", map[string]string{"qn-role": "probe-unknown"}, nil)
		_, err := nodes(cluster.Dynamic, namespace).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !webhookRefused(err, "names no known role") {
			return fmt.Errorf("not the webhook's refusal yet: %v", err)
		}
		return nil
	})
	byWhom := map[string]int{}
	compared := 0
	for _, r := range cases {
		if r.skip != "" {
			skipped = append(skipped, fmt.Sprintf("%s %q: %s", r.file, r.name, r.skip))
			continue
		}
		alone := answerOf(r.send(t))
		both := withPolicy[r]
		compared++
		if both.allowed != alone.allowed {
			t.Errorf("%s %q: with the policy allowed=%v (%s), the webhook alone allowed=%v (%s)", r.file, r.name, both.allowed, both.by, alone.allowed, alone.by)
		}
		if !both.allowed {
			byWhom[both.by]++
		}
		// The replay is faithful: the webhook alone answers as the case
		// expects, rate windows aside (a dry run counts in none), unless
		// the CRD refused first (a case may judge a shape the API server
		// never lets through, to show what the webhook does with it).
		if r.expectAllowed != nil && r.windowCount == 0 && alone.by != "CRD" && *r.expectAllowed != alone.allowed {
			t.Errorf("%s %q: expected allowed=%v, the webhook alone through the API server says %v (%s)", r.file, r.name, *r.expectAllowed, alone.allowed, alone.by)
		}
	}
	t.Logf("%d fixture cases compared; refused with the policy by: %v", compared, byWhom)
	for _, s := range skipped {
		t.Logf("not replayed: %s", s)
	}
	if compared < 40 || byWhom["policy"] < 10 {
		t.Errorf("the replay covers too little: %d cases, %d refused by the policy", compared, byWhom["policy"])
	}
}

// unregister removes the webhook configurations and the binding, and waits
// until writes go through unjudged.
func unregister(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	webhookMu.Lock()
	w := webhook
	webhook = nil
	webhookMu.Unlock()
	if w != nil {
		if err := w.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	_ = cluster.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, registration, metav1.DeleteOptions{})
	_ = cluster.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, registration, metav1.DeleteOptions{})
	if out, err := cluster.RunKubectl(ctx, "", "delete", "validatingadmissionpolicybinding", vap.DefaultName); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	harness.WaitFor(t, 60*time.Second, "writes to go through unjudged", func() error {
		o := qn("probe", map[string]string{"qn-role": "probe-unknown"}, nil)
		_, err := nodes(cluster.Dynamic, namespace).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// waitForWebhook waits until both of qn-webhook's configurations answer:
// the mutating one labels a dry run, the validating one warns of its
// privileged port (only the webhook warns).
func waitForWebhook(t *testing.T) {
	t.Helper()
	rec := &harness.Warnings{}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WarningHandler = rec
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 60*time.Second, "qn-webhook to answer", func() error {
		o := qn("probe", nil, nil)
		o.Object["spec"].(map[string]any)["services"] = []any{map[string]any{"name": "https", "port": int64(443)}}
		got, err := nodes(dyn, namespace).Create(context.Background(), o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if got.GetLabels()["qn.dev/managed-by"] != "qn-admission" || !rec.Seen("uses privileged port 443") {
			return fmt.Errorf("qn-webhook does not answer yet")
		}
		return nil
	})
}
