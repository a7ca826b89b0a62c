package load

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestCheckerAcceptsOnlyCorrectAdmissionReviews(t *testing.T) {
	fixtures := loadTestFixtures(t)
	allowed := fixtureNamed(t, fixtures, "default-create-allowed.json")
	denied := fixtureNamed(t, fixtures, "default-create-denied.json")
	labelled := fixtureNamed(t, fixtures, "realtime-update-allowed.json")
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	addLabel := b64(`[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`)
	const ok = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u1","allowed":true}}`
	const deny = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u1","allowed":false,"status":{"code":403,"message":"no"}}}`
	patched := func(patch string) string {
		return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u1","allowed":true,"patchType":"JSONPatch","patch":"` + patch + `"}}`
	}
	validate := func(f *Fixture) Call { return Call{Fixture: f} }
	mutate := func(f *Fixture) Call { return Call{Fixture: f, Mutating: true} }

	cases := map[string]struct {
		call   Call
		judge  bool
		status int
		ctype  string
		body   string
		want   string // "" for a correct answer
	}{
		"an admitted review that echoes the uid":            {validate(allowed), true, 200, "application/json", ok, ""},
		"a denial with a message":                           {validate(denied), true, 200, "application/json", deny, ""},
		"a patch that sets the label, on /mutate":           {mutate(allowed), true, 200, "application/json", patched(addLabel), ""},
		"a patch that creates labels where there were none": {mutate(allowed), true, 200, "application/json", patched(b64(`[{"op":"add","path":"/metadata/labels","value":{"qn.dev/managed-by":"qn-admission"}}]`)), ""},
		"no patch where the label is already there":         {mutate(labelled), true, 200, "application/json", ok, ""},
		"the ceiling admitting what policies deny":          {validate(denied), false, 200, "application/json", ok, ""},
		"a status other than 200":                           {validate(allowed), true, 500, "application/json", ok, "HTTP 500"},
		"a body that is not JSON":                           {validate(allowed), true, 200, "application/json", `<html>`, "not an AdmissionReview"},
		"a Content-Type that is not JSON":                   {validate(allowed), true, 200, "text/plain", ok, "Content-Type"},
		"the wrong apiVersion":                              {validate(allowed), true, 200, "application/json", strings.Replace(ok, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1), "apiVersion"},
		"keys in the wrong case":                            {validate(allowed), true, 200, "application/json", strings.Replace(ok, `"uid"`, `"UID"`, 1), "response.uid"},
		"no response":                                       {validate(allowed), true, 200, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, "no response"},
		"another request's uid":                             {validate(allowed), true, 200, "application/json", strings.Replace(ok, "u1", "u2", 1), `want the request's "u1"`},
		"a patch from the validating webhook":               {validate(allowed), true, 200, "application/json", patched(addLabel), "validating webhook answered with a patch"},
		"a patch without patchType":                         {mutate(allowed), true, 200, "application/json", strings.Replace(patched(addLabel), `"patchType":"JSONPatch",`, "", 1), "patchType and patch must come together"},
		"a denial without a message":                        {validate(denied), true, 200, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u1","allowed":false}}`, "without a message"},
		"admitting what the policies deny":                  {validate(denied), true, 200, "application/json", ok, "allowed=true, want false"},
		"denying what the policies admit":                   {validate(allowed), true, 200, "application/json", deny, "allowed=false, want true"},
		"no patch where one is due":                         {mutate(allowed), true, 200, "application/json", ok, "no patch"},
		"a patch where none is due":                         {mutate(labelled), true, 200, "application/json", patched(addLabel), "unexpected patch"},
		"a patch that sets another label":                   {mutate(allowed), true, 200, "application/json", patched(b64(`[{"op":"add","path":"/metadata/labels/team","value":"x"}]`)), "managed-by"},
		"a patch that does not apply":                       {mutate(allowed), true, 200, "application/json", patched(b64(`[{"op":"replace","path":"/metadata/nothing/here","value":"x"}]`)), "does not apply"},
		"a patch that is not a JSONPatch":                   {mutate(allowed), true, 200, "application/json", patched(b64(`{"op":"add"}`)), "not a JSONPatch"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := &Checker{Judge: tc.judge}
			err := c.Check(tc.call, "u1", tc.status, tc.ctype, []byte(tc.body))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused a correct answer: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted a wrong answer, want an error saying %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestCheckerRemembersAProvenPatchPerFixture(t *testing.T) {
	fixtures := loadTestFixtures(t)
	withLabels := fixtureNamed(t, fixtures, "default-create-allowed.json")
	patch := []byte(`[{"op":"add","path":"/metadata/labels/qn.dev~1managed-by","value":"qn-admission"}]`)
	c := &Checker{Judge: true}
	if err := c.checkPatch(withLabels, patch); err != nil {
		t.Fatal(err)
	}
	// The same bytes for a fixture without the object they apply to must
	// still be proven against that fixture, not taken from the cache.
	noObject := &Fixture{Name: "no-object", Object: []byte(`{"metadata":{}}`)}
	if err := c.checkPatch(noObject, patch); err == nil {
		t.Fatal("a patch proven for one fixture was accepted for another it does not apply to")
	}
}
