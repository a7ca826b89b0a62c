package chart

import (
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"strings"
	"testing"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	digestC = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

// podImages maps every container and init container of every Deployment
// the release renders to its image.
func podImages(t *testing.T, rel *chartrender.Release) map[string]string {
	t.Helper()
	images := map[string]string{}
	for _, dep := range deployments(t, rel) {
		for _, c := range allContainers(&dep.Spec.Template.Spec) {
			images[c.Name] = c.Image
		}
	}
	return images
}

// Every image reference comes from its block of values.yaml: the chart's
// own images at the chart's appVersion unless a tag says otherwise, and a
// digest wins over the tag, for every image the chart runs.
func TestImageReferences(t *testing.T) {
	ch, err := chartrender.Load()
	if err != nil {
		t.Fatal(err)
	}
	appVersion := ch.Metadata.AppVersion
	for name, tc := range map[string]struct {
		values string
		want   map[string]string // container -> image
	}{
		"default values: the chart's own images at its appVersion": {
			values: "",
			want: map[string]string{
				"qn-webhook":    "ghcr.io/quantumnode/qn-webhook:" + appVersion,
				"qn-controller": "ghcr.io/quantumnode/qn-controller:" + appVersion,
			},
		},
		"a tag replaces the appVersion": {
			values: "webhook: {image: {tag: 0.9.0}}",
			want: map[string]string{
				"qn-webhook":    "ghcr.io/quantumnode/qn-webhook:0.9.0",
				"qn-controller": "ghcr.io/quantumnode/qn-controller:" + appVersion,
			},
		},
		"a digest wins over the tag and the appVersion": {
			values: "webhook: {image: {tag: 0.9.0, digest: " + digestA + "}}\ncontroller: {image: {digest: " + digestB + "}}",
			want: map[string]string{
				"qn-webhook":    "ghcr.io/quantumnode/qn-webhook@" + digestA,
				"qn-controller": "ghcr.io/quantumnode/qn-controller@" + digestB,
			},
		},
		"git-sync and the bundled Redis are pinned the same way": {
			values: "policies: {source: gitSync, gitSync: {repo: https://git.example.com/p.git, image: {digest: " + digestA + "}}}\n" +
				"windows: {store: redis, redis: {bundled: {enabled: true, image: {digest: " + digestC + "}}}}",
			want: map[string]string{
				"git-sync": "registry.k8s.io/git-sync/git-sync@" + digestA,
				"redis":    "docker.io/library/redis@" + digestC,
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := podImages(t, render(t, tc.values))
			for container, want := range tc.want {
				if got[container] != want {
					t.Errorf("%s image %q, want %q", container, got[container], want)
				}
			}
		})
	}
}

// Moving every repository in values.yaml moves every image the chart runs:
// no image is named anywhere else (a mirror or an air-gapped registry needs
// nothing but values).
func TestEveryImageIsNamedInValues(t *testing.T) {
	rel := render(t, `
webhook: {image: {repository: mirror.example.com/qn-webhook}}
controller: {image: {repository: mirror.example.com/qn-controller}}
policies: {source: gitSync, gitSync: {repo: https://git.example.com/p.git, image: {repository: mirror.example.com/git-sync}}}
windows: {store: redis, redis: {bundled: {enabled: true, image: {repository: mirror.example.com/redis}}}}
`)
	images := podImages(t, rel)
	if len(images) != 4 {
		t.Errorf("containers %v: want qn-webhook, git-sync, qn-controller and redis", images)
	}
	for container, image := range images {
		if !strings.HasPrefix(image, "mirror.example.com/") {
			t.Errorf("%s runs %s, which values.yaml does not name", container, image)
		}
	}
}

// The chart's version and appVersion are the release's: one number, so
// that `helm install` of a packaged chart runs the images of its own
// release (docs/release.md).
func TestChartVersionIsTheAppVersion(t *testing.T) {
	ch, err := chartrender.Load()
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != ch.Metadata.AppVersion {
		t.Errorf("Chart.yaml version %s, appVersion %s: a release names the same version in both", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
}
