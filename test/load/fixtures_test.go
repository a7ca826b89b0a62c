package load

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func loadTestFixtures(t testing.TB) []*Fixture {
	t.Helper()
	fixtures, err := LoadFixtures("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return fixtures
}

func fixtureNamed(t testing.TB, fixtures []*Fixture, name string) *Fixture {
	t.Helper()
	for _, f := range fixtures {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no fixture %s", name)
	return nil
}

func TestFixturesCoverEveryRoleAndOutcome(t *testing.T) {
	fixtures := loadTestFixtures(t)
	roles := map[string]bool{}
	var allowed, denied, patched, unpatched, updateWithOld, pod int
	for _, f := range fixtures {
		var rev struct {
			Request struct {
				Kind      struct{ Kind string }
				Operation string
				Object    struct {
					Metadata struct{ Annotations map[string]string }
				}
				OldObject json.RawMessage `json:"oldObject"`
			}
		}
		if err := json.Unmarshal(f.Body("u", "someone"), &rev); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if rev.Request.Kind.Kind == "QuantumNode" {
			role := rev.Request.Object.Metadata.Annotations["qn-role"]
			if role == "" {
				role = "default"
			}
			roles[role] = true
		}
		if rev.Request.Kind.Kind == "Pod" {
			pod++
			if f.Size < 4500 || f.Size > 6000 {
				t.Errorf("the Pod review is %d bytes; it stands for a ~5 KB real one", f.Size)
			}
		}
		if rev.Request.Operation == "UPDATE" && len(rev.Request.OldObject) > 0 && string(rev.Request.OldObject) != "null" {
			updateWithOld++
		}
		if f.Validate.Allowed {
			allowed++
		} else {
			denied++
		}
		if f.Mutate.Patched {
			patched++
		} else {
			unpatched++
		}
	}
	for _, role := range []string{"realtime", "batch", "default"} {
		if !roles[role] {
			t.Errorf("no QuantumNode fixture for role %s", role)
		}
	}
	for what, n := range map[string]int{"allowed": allowed, "denied": denied, "patched": patched, "unpatched": unpatched, "UPDATE with oldObject": updateWithOld, "Pod": pod} {
		if n == 0 {
			t.Errorf("no %s fixture", what)
		}
	}
}

func TestEveryRequestGetsItsOwnUIDAndUserAndIsOtherwiseTheFixture(t *testing.T) {
	for _, f := range loadTestFixtures(t) {
		raw, err := os.ReadFile(filepath.Join("testdata", f.Name))
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		req := want["request"].(map[string]any)
		req["uid"] = "0000-fresh"
		req["userInfo"].(map[string]any)["username"] = "qnload-user-7"
		var got map[string]any
		if err := json.Unmarshal(f.Body("0000-fresh", "qnload-user-7"), &got); err != nil {
			t.Fatalf("%s: body is not JSON: %v", f.Name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the body differs from the fixture beyond uid and user", f.Name)
		}
		if strings.Contains(string(f.Body("a", "b")), "\n") {
			t.Errorf("%s: body is not compact", f.Name)
		}
	}
}

func TestUIDsAreUniqueAndUUIDShaped(t *testing.T) {
	shape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4000-8000-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for _, run := range []uint32{1, 0xdeadbeef} {
		for _, seq := range []uint64{0, 1, 2, 1 << 24, 1<<24 + 1, 1 << 48, 1<<48 + 1, 1<<64 - 1} {
			uid := string(appendUID(nil, run, seq))
			if !shape.MatchString(uid) {
				t.Errorf("uid %q is not UUID-shaped", uid)
			}
			if seen[uid] {
				t.Errorf("uid %q repeats (run %x seq %d)", uid, run, seq)
			}
			seen[uid] = true
		}
	}
}

func TestLoadFixturesRefusesWhatItCannotCheck(t *testing.T) {
	valid, err := os.ReadFile(filepath.Join("testdata", "default-create-allowed.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		name, body, want string
	}{
		"a fixture without an expected decision": {"surprise.json", string(valid), "no expected decision"},
		"a review without a uid":                 {"default-create-allowed.json", strings.Replace(string(valid), `"uid": "3f1c0c4e-6a7b-4d7e-9a52-000000000001"`, `"uid": ""`, 1), "no request.uid"},
		"something that is not a review":         {"default-create-allowed.json", `{"apiVersion":"v1","kind":"Pod"}`, "not an admission.k8s.io/v1 AdmissionReview"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tc.name), []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadFixtures(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestTemplateNeedsExactlyOneUIDAndOneUserSlot(t *testing.T) {
	cases := map[string]string{
		"no user slot":   `{"uid":"` + uidMarker + `"}`,
		"two uid slots":  `{"uid":"` + uidMarker + `","u":"` + userMarker + `","x":"` + uidMarker + `"}`,
		"no slot at all": `{}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := newTemplate([]byte(body)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
