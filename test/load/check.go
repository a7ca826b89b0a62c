package load

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"

	"github.com/quantumnode/qn-admission/internal/clip"
)

// managedByLabel is what the bundled mutating policy adds.
const (
	managedByLabel = "qn.dev/managed-by"
	managedByValue = "qn-admission"
)

// Checker judges answers. Every answer must be what kube-apiserver accepts
// from a webhook: HTTP 200, an admission.k8s.io/v1 AdmissionReview whose
// response echoes the request's uid, a patch only with patchType JSONPatch
// and only from a mutating webhook. With Judge set, the decision must also
// be the fixture's expected one, and a patch must set the managed-by label
// when applied to the object.
type Checker struct {
	Judge bool
	// Revision, when set, is the policy revision every answer must name
	// (auditAnnotations.revision): the served set, not a shadow's.
	Revision string
	// patches remembers patches already proven for a fixture: each distinct
	// patch is applied once, not on every request.
	patches sync.Map // fixture name + "\x00" + patch -> struct{}
}

// Check returns nil for a correct answer and a sentence saying what is
// wrong otherwise.
func (c *Checker) Check(call Call, uid string, status int, contentType string, body []byte) error {
	if status != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d, want 200: %s", call, status, clip.Bytes(body, bodyBytes))
	}
	if !strings.HasPrefix(contentType, "application/json") {
		return fmt.Errorf("%s: Content-Type %q, want application/json", call, contentType)
	}
	var rev admissionv1.AdmissionReview
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &rev); err != nil {
		return fmt.Errorf("%s: answer is not an AdmissionReview: %v: %s", call, err, clip.Bytes(body, bodyBytes))
	}
	if rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" {
		return fmt.Errorf("%s: answer is apiVersion %q kind %q, want admission.k8s.io/v1 AdmissionReview", call, rev.APIVersion, rev.Kind)
	}
	r := rev.Response
	if r == nil {
		return fmt.Errorf("%s: answer has no response: %s", call, clip.Bytes(body, bodyBytes))
	}
	if string(r.UID) != uid {
		return fmt.Errorf("%s: response.uid %q, want the request's %q", call, r.UID, uid)
	}
	if (r.PatchType != nil) != (len(r.Patch) > 0) {
		return fmt.Errorf("%s: patchType and patch must come together (patchType %v, %d patch bytes)", call, r.PatchType, len(r.Patch))
	}
	if len(r.Patch) > 0 {
		if !call.Mutating {
			return fmt.Errorf("%s: a validating webhook answered with a patch", call)
		}
		if *r.PatchType != admissionv1.PatchTypeJSONPatch {
			return fmt.Errorf("%s: patchType %q, want JSONPatch", call, *r.PatchType)
		}
		if !r.Allowed {
			return fmt.Errorf("%s: a denial carries a patch", call)
		}
	}
	if !r.Allowed && (r.Result == nil || r.Result.Message == "") {
		return fmt.Errorf("%s: a denial without a message: %s", call, clip.Bytes(body, bodyBytes))
	}
	if c.Revision != "" && r.AuditAnnotations["revision"] != c.Revision {
		return fmt.Errorf("%s: answered by policy revision %q, want the served set's %q", call, r.AuditAnnotations["revision"], c.Revision)
	}
	if !c.Judge {
		return nil
	}
	want := call.Expect()
	if r.Allowed != want.Allowed {
		msg := ""
		if r.Result != nil {
			msg = r.Result.Message
		}
		return fmt.Errorf("%s: allowed=%v, want %v (%s)", call, r.Allowed, want.Allowed, msg)
	}
	if !call.Mutating {
		return nil
	}
	if !want.Patched {
		if len(r.Patch) > 0 {
			return fmt.Errorf("%s: unexpected patch %s", call, r.Patch)
		}
		return nil
	}
	if len(r.Patch) == 0 {
		return fmt.Errorf("%s: no patch, want one that sets %s", call, managedByLabel)
	}
	return c.checkPatch(call.Fixture, r.Patch)
}

func (c *Checker) checkPatch(f *Fixture, patch []byte) error {
	key := f.Name + "\x00" + string(patch)
	if _, ok := c.patches.Load(key); ok {
		return nil
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return fmt.Errorf("mutate %s: patch is not a JSONPatch: %v: %s", f.Name, err, patch)
	}
	patched, err := p.Apply(f.Object)
	if err != nil {
		return fmt.Errorf("mutate %s: patch does not apply to the object: %v: %s", f.Name, err, patch)
	}
	var obj struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patched, &obj); err != nil {
		return fmt.Errorf("mutate %s: patched object: %v", f.Name, err)
	}
	if got := obj.Metadata.Labels[managedByLabel]; got != managedByValue {
		return fmt.Errorf("mutate %s: after the patch label %s is %q, want %q: %s", f.Name, managedByLabel, got, managedByValue, patch)
	}
	c.patches.Store(key, struct{}{})
	return nil
}

// bodyBytes is how much of an answer an error quotes.
const bodyBytes = 300
