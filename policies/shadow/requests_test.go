package shadow

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/webhook"
)

// The shadow's tests judge requests as the webhook hands them over: an
// AdmissionRequest turned into an Input by the webhook's own extraction.

// requestTime is when every test request is served.
var requestTime = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

// oneRoleTable is a role table whose role r has a window of three changes
// per user and runs package p.
const oneRoleTable = "defaultRole: r\nroles:\n  r:\n    operations: [CREATE, UPDATE]\n    window: {limit: 3, period: 60s}\n    packages: [p]\n"

// loadSet is oneRoleTable with policy as its package p.
func loadSet(t testing.TB, policy string) *policies.Set {
	t.Helper()
	files := fstest.MapFS{"roles.yaml": {Data: []byte(oneRoleTable)}, "p.rego": {Data: []byte(policy)}}
	set, err := policies.Load(context.Background(), files, policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// nodeObject is a QuantumNode edge-1 in namespace edge with labels and
// annotations, as JSON.
func nodeObject(t testing.TB, labels, annotations map[string]string) []byte {
	t.Helper()
	metadata := map[string]any{"name": "edge-1", "namespace": "edge"}
	if labels != nil {
		metadata["labels"] = labels
	}
	if annotations != nil {
		metadata["annotations"] = annotations
	}
	object, err := json.Marshal(map[string]any{
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": metadata,
		"spec": map[string]any{
			"hardware": map[string]any{"arch": "arm64"},
			"services": []any{map[string]any{"name": "mqtt", "port": 8883}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return object
}

// requests numbers the test requests: each has a uid of its own, as the
// rate windows count a uid once.
var requests atomic.Int64

// nodeRequest is user's request to write the QuantumNode edge-1: object
// on CREATE, object over oldObject on UPDATE.
func nodeRequest(op admissionv1.Operation, user string, object, oldObject []byte) *admissionv1.AdmissionRequest {
	return &admissionv1.AdmissionRequest{
		UID:       types.UID(fmt.Sprintf("7f0b2d1c-%04d", requests.Add(1))),
		Kind:      metav1.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"},
		Resource:  metav1.GroupVersionResource{Group: "qn.dev", Version: "v1alpha1", Resource: "quantumnodes"},
		Name:      "edge-1",
		Namespace: "edge",
		Operation: op,
		UserInfo:  authenticationv1.UserInfo{Username: user, Groups: []string{"system:authenticated"}},
		Object:    runtime.RawExtension{Raw: object},
		OldObject: runtime.RawExtension{Raw: oldObject},
	}
}

// inputOf is the Input the webhook extracts from req, its objects decoded
// under reads as the webhook decodes them for a Decider that reads that
// (nil: whole).
func inputOf(t testing.TB, req *admissionv1.AdmissionRequest, reads *policies.ObjectReads) *policies.Input {
	t.Helper()
	var objs webhook.Objects
	decode := func(raw []byte, p *astjson.Projection) ast.Value {
		if len(raw) == 0 {
			return nil
		}
		v, _, err := astjson.DecodeProjected(raw, p)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var object, oldObject *astjson.Projection // nil: whole
	if reads != nil {
		object, oldObject = reads.Object, reads.OldObject
	}
	objs.Object, objs.OldObject = decode(req.Object.Raw, object), decode(req.OldObject.Raw, oldObject)
	var c capture
	if _, _, d := webhook.AnswerObjects(context.Background(), &c, req, objs, policies.PathValidate, requestTime); c.in == nil {
		t.Fatalf("the webhook refused the request: %s", d.Message)
	}
	c.in.ObjectReads = reads
	return c.in
}

// capture is a Decider that keeps the Input it is asked about.
type capture struct {
	webhook.WholeObjects
	in *policies.Input
}

func (c *capture) Validate(_ context.Context, in *policies.Input) policies.Decision {
	c.in = in
	return policies.Allow()
}

func (c *capture) Mutate(ctx context.Context, in *policies.Input) policies.Decision {
	return c.Validate(ctx, in)
}

// nodeInput is user's creation of edge-1 labelled labels, decoded whole.
func nodeInput(t testing.TB, user string, labels map[string]string) *policies.Input {
	return inputOf(t, nodeRequest(admissionv1.Create, user, nodeObject(t, labels, nil), nil), nil)
}
