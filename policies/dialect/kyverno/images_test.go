package kyverno

import (
	"encoding/json"
	"strings"
	"testing"
)

const digest = "sha256:4d2ba7fc24c0e5a2f8c3b0d1e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0"

// Each image reference is described as Kyverno describes it (the same
// answers test/kyvernoparity checks against Kyverno's engine through the
// disallow-latest-tag fixture folder).
func TestImageReferencesGetKyvernosDefaults(t *testing.T) {
	for image, want := range map[string]string{
		"nginx is docker.io's, tag latest, without library/":    `{"name":"nginx","path":"nginx","reference":"docker.io/nginx:latest","referenceWithTag":"docker.io/nginx:latest","registry":"docker.io","tag":"latest"}`,
		"library/nginx:1.27 keeps its library/":                 `{"name":"nginx","path":"library/nginx","reference":"docker.io/library/nginx:1.27","referenceWithTag":"docker.io/library/nginx:1.27","registry":"docker.io","tag":"1.27"}`,
		"ghcr.io/org/team/app:v1":                               `{"name":"app","path":"org/team/app","reference":"ghcr.io/org/team/app:v1","referenceWithTag":"ghcr.io/org/team/app:v1","registry":"ghcr.io","tag":"v1"}`,
		"localhost:5000/app":                                    `{"name":"app","path":"app","reference":"localhost:5000/app:latest","referenceWithTag":"localhost:5000/app:latest","registry":"localhost:5000","tag":"latest"}`,
		"localhost/app:dev":                                     `{"name":"app","path":"app","reference":"localhost/app:dev","referenceWithTag":"localhost/app:dev","registry":"localhost","tag":"dev"}`,
		"my_registry/tool:2 is a path on docker.io":             `{"name":"tool","path":"my_registry/tool","reference":"docker.io/my_registry/tool:2","referenceWithTag":"docker.io/my_registry/tool:2","registry":"docker.io","tag":"2"}`,
		"nginx@" + digest + " has no tag":                       `{"digest":"` + digest + `","name":"nginx","path":"nginx","reference":"docker.io/nginx@` + digest + `","referenceWithTag":"docker.io/nginx:","registry":"docker.io"}`,
		"nginx:1.27@" + digest + " is referenced by its digest": `{"digest":"` + digest + `","name":"nginx","path":"nginx","reference":"docker.io/nginx@` + digest + `","referenceWithTag":"docker.io/nginx:1.27","registry":"docker.io","tag":"1.27"}`,
	} {
		t.Run(image, func(t *testing.T) {
			ref := strings.Fields(image)[0]
			info, err := imageInfo(ref)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(info); string(got) != want {
				t.Errorf("%s:\n got  %s\n want %s", ref, got, want)
			}
		})
	}
	for _, bad := range []string{"Nginx", "nginx:", "ghcr.io/app@sha256:short"} {
		if info, err := imageInfo(bad); err == nil {
			t.Errorf("%s: %v, want an error (not a reference)", bad, info)
		}
	}
}

// images is read where each kind keeps its Pod spec, by container kind
// and name, with the JSON pointer of each image; a kind without one,
// and a Pod without images, have none.
func TestImagesOfPodsAndPodControllers(t *testing.T) {
	containers := `
      initContainers: [{name: setup, image: "busybox:1.36"}]
      containers: [{name: app, image: "ghcr.io/org/app:v1"}, {name: no-image}]
      ephemeralContainers: [{name: debug, image: busybox}]`
	for name, tc := range map[string]struct{ src, want string }{
		"Pod": {
			"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:" + strings.ReplaceAll(containers, "\n      ", "\n  "),
			`containers.app=/spec/containers/0/image ephemeralContainers.debug=/spec/ephemeralContainers/0/image initContainers.setup=/spec/initContainers/0/image`,
		},
		"Deployment": {
			"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:" + strings.ReplaceAll(containers, "\n      ", "\n      "),
			`containers.app=/spec/template/spec/containers/0/image ephemeralContainers.debug=/spec/template/spec/ephemeralContainers/0/image initContainers.setup=/spec/template/spec/initContainers/0/image`,
		},
		"CronJob": {
			"apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:" + strings.ReplaceAll(containers, "\n      ", "\n          "),
			`containers.app=/spec/jobTemplate/spec/template/spec/containers/0/image ephemeralContainers.debug=/spec/jobTemplate/spec/template/spec/ephemeralContainers/0/image initContainers.setup=/spec/jobTemplate/spec/template/spec/initContainers/0/image`,
		},
		"a ConfigMap has none":          {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata: {image: nginx}", ``},
		"a Pod without images has none": {"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}]}", ``},
	} {
		t.Run(name, func(t *testing.T) {
			images, err := extractImages(object(t, tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if images != nil {
					t.Fatalf("images %v, want none (nil: the variable is left out)", images)
				}
				return
			}
			var got []string
			for _, kind := range []string{"containers", "ephemeralContainers", "initContainers"} {
				byName, _ := images[kind].(map[string]any)
				for n, info := range byName {
					got = append(got, kind+"."+n+"="+info.(map[string]any)["jsonPointer"].(string))
				}
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("images:\n got  %s\n want %s", strings.Join(got, " "), tc.want)
			}
		})
	}
	if _, err := extractImages(object(t, "kind: Pod\nspec: {containers: [{image: nginx}]}")); err == nil || err.Error() != "invalid key" {
		t.Errorf("a container without a name: %v, want Kyverno's invalid key", err)
	}
}

const restrictRegistries = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: restrict-registries}
spec:
  validationFailureAction: Enforce
  rules:
  - name: registries
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "registries {{ images.containers.*.registry }} are not allowed"
      deny:
        conditions:
          any:
          - key: "{{ images.containers.*.registry }}"
            operator: AnyNotIn
            value: [ghcr.io]
  - name: init-tags
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "init image {{ element.reference }} ({{ element.jsonPointer }}) has tag {{ element.tag }}"
      foreach:
      - list: images.initContainers.*
        deny:
          conditions:
            any:
            - key: "{{ element.tag }}"
              operator: Equals
              value: latest
`

// A deny condition over images.containers.*.registry and a foreach over
// images judge Pods, and the autogen rules judge Deployments and CronJobs
// by their templates' images.
func TestImagesInDenyConditionsForEachAndAutogenRules(t *testing.T) {
	p := load(t, restrictRegistries)
	cases := map[string]struct {
		src  string
		want []string
	}{
		"a Pod from ghcr.io with a pinned init container passes": {
			"apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec:\n  initContainers: [{name: i, image: \"ghcr.io/i:1\"}]\n  containers: [{name: a, image: \"ghcr.io/a:1\"}]",
			[]string{"registries=pass", "init-tags=pass"},
		},
		"a Pod from docker.io, with an untagged init image": {
			"apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  initContainers: [{name: i, image: busybox}]\n  containers: [{name: a, image: nginx}]",
			[]string{`registries=fail: registries ["docker.io"] are not allowed`, "init-tags=fail: validation failure: init image docker.io/busybox:latest (/spec/initContainers/0/image) has tag latest"},
		},
		"a Pod without init containers has nothing for the foreach": {
			"apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers: [{name: a, image: \"ghcr.io/a:1\"}]",
			[]string{"registries=pass"},
		},
		"a Deployment's template": {
			"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n      initContainers: [{name: i, image: \"quay.io/i\"}]\n      containers: [{name: a, image: \"quay.io/a:1\"}]",
			[]string{`autogen-registries=fail: registries ["quay.io"] are not allowed`, "autogen-init-tags=fail: validation failure: init image quay.io/i:latest (/spec/template/spec/initContainers/0/image) has tag latest"},
		},
		"a CronJob's job template": {
			"apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers: [{name: a, image: \"ghcr.io/a:1\"}]",
			[]string{"autogen-cronjob-registries=pass"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := results(p, request("CREATE", object(t, tc.src), nil))
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("results:\n got  %q\n want %q", got, tc.want)
			}
		})
	}
}

// Kyverno reads images from the request's new object only: none on
// DELETE (a path into images then finds nothing), and on UPDATE the old
// object's check of pre-existing violations still sees the new object's
// images. An image that is not a reference is an error of the rules that
// read images, and of no other rule.
func TestImagesComeFromTheNewObject(t *testing.T) {
	p := load(t, restrictRegistries)
	bad := object(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: nginx}]")
	good := object(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: \"ghcr.io/a:1\"}]")
	if got := results(p, request("DELETE", nil, bad)); strings.Join(got, "|") != "registries=pass" {
		t.Errorf("DELETE: %q, want images absent (the registries are null, which AnyNotIn does not fail)", got)
	}
	// The old object is bad, the new one good: the rule passes. Were the
	// old object's images read for the pre-existing check, nothing would
	// change; the reverse is the telling case: new bad, old good, both
	// judged by the new images, so the update is a pre-existing
	// violation and skipped.
	if got := results(p, request("UPDATE", good, bad)); strings.Join(got, "|") != "registries=pass" {
		t.Errorf("UPDATE to a good image: %q", got)
	}
	if got := results(p, request("UPDATE", bad, good)); strings.Join(got, "|") != "registries=skip: skipping the rule evaluation as pre-existing violations are allowed" {
		t.Errorf("UPDATE to a bad image: %q, want Kyverno's skip (its old-object check reads the new object's images)", got)
	}

	mixed := load(t, strings.Replace(restrictRegistries, "  - name: init-tags\n", `  - name: names
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      deny:
        conditions:
          any:
          - {key: "{{ request.object.metadata.name }}", operator: Equals, value: forbidden}
  - name: init-tags
`, 1))
	upper := object(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: \"Nginx\"}]")
	got := results(mixed, request("CREATE", upper, nil))
	if len(got) != 3 || !strings.HasPrefix(got[0], "registries=error: failed to check deny conditions: ") || !strings.Contains(got[0], "invalid image 'Nginx'") ||
		got[1] != "names=pass" || !strings.HasPrefix(got[2], "init-tags=error: failed to evaluate list: invalid image 'Nginx'") {
		t.Errorf("an image that is not a reference: %q, want an error of the rules that read images only", got)
	}
}

// A rule that never names images never computes them, and a context
// variable named images is merged with them as Kyverno's context does.
func TestImagesAreComputedOnlyForRulesThatReadThem(t *testing.T) {
	p := load(t, requireLabels)
	for _, r := range p.rules {
		if r.readsImages {
			t.Errorf("rule %s reads no images but would compute them", r.spec.Name)
		}
	}
	src := newImageSource(object(t, pod), "CREATE")
	d := document{vars: map[string]any{"images": map[string]any{"team": "a", "containers": map[string]any{"extra": "x"}}}, images: src}
	got, err := d.query("[images.team, images.containers.extra, images.containers.app.tag]")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(got); string(b) != `["a","x","1.27"]` {
		t.Errorf("merged images: %s", b)
	}
	if !src.done {
		t.Error("the images were not computed for a query that reads them")
	}
	if other := newImageSource(object(t, pod), "CREATE"); func() bool {
		_, _ = (document{vars: map[string]any{"request": map[string]any{"images": 1}}, images: other}).query("request.images")
		return other.done
	}() {
		t.Error("request.images is not Kyverno's images variable, but computed them")
	}
}

// A foreach list that is not a list is Kyverno's list of one element: a
// foreach over images.containers judges the map of containers once.
func TestForEachOverAMapJudgesItOnce(t *testing.T) {
	p := load(t, `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: count}
spec:
  rules:
  - name: at-most-one
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "{{ length(element) }} containers"
      foreach:
      - list: images.containers
        deny:
          conditions:
            any:
            - {key: "{{ length(element) }}", operator: GreaterThan, value: 1}
`)
	if got := results(p, request("CREATE", object(t, pod), nil)); strings.Join(got, "|") != "at-most-one=fail: validation failure: 2 containers" {
		t.Errorf("foreach over a map: %q", got)
	}
}
