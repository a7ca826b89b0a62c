package main

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var builtForChart = map[string]builtImage{
	"qn-webhook":    {Name: "qn-webhook", Repository: "ghcr.io/quantumnode/qn-webhook", Tag: "0.1.0", Digest: "sha256:" + strings.Repeat("a", 64)},
	"qn-controller": {Name: "qn-controller", Repository: "ghcr.io/quantumnode/qn-controller", Tag: "0.1.0", Digest: "sha256:" + strings.Repeat("b", 64)},
}

const chartValues = `# The chart's values.
webhook:
  image:
    repository: ghcr.io/quantumnode/qn-webhook
    # Empty means the chart's appVersion.
    tag: ""
    digest: ""   # set by the release
    pullPolicy: IfNotPresent

  validatingOperations: [CREATE, UPDATE, DELETE]
controller:
  image:
    repository: ghcr.io/quantumnode/qn-controller
    tag: ""
    digest: ''
`

func TestPinValuesChangesTheDigestsAlone(t *testing.T) {
	pinned, err := pinValues([]byte(chartValues), builtForChart)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer(
		`digest: ""   # set by the release`, `digest: "sha256:`+strings.Repeat("a", 64)+`"   # set by the release`,
		`digest: ''`, `digest: "sha256:`+strings.Repeat("b", 64)+`"`,
	).Replace(chartValues)
	if string(pinned) != want {
		t.Errorf("pinned values:\n%s\nwant:\n%s", pinned, want)
	}
	var v struct {
		Controller struct {
			Image struct{ Digest string }
		}
	}
	if err := yaml.Unmarshal(pinned, &v); err != nil {
		t.Fatal(err)
	}
	if v.Controller.Image.Digest != builtForChart["qn-controller"].Digest {
		t.Errorf("controller digest %q", v.Controller.Image.Digest)
	}
}

func TestPinValuesRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		values string
		images map[string]builtImage
		want   string
	}{
		"images built for another registry than the chart pulls from": {
			values: strings.Replace(chartValues, "ghcr.io/quantumnode/qn-controller", "registry.example.com/qn-controller", 1),
			images: builtForChart,
			want:   "controller.image.repository is registry.example.com/qn-controller, but qn-controller was built as ghcr.io/quantumnode/qn-controller",
		},
		"a chart without a digest value": {
			values: strings.Replace(chartValues, "    digest: ''\n", "", 1),
			images: builtForChart,
			want:   "no controller.image.digest to pin",
		},
		"an image the chart installs was not built": {
			values: chartValues,
			images: map[string]builtImage{"qn-webhook": builtForChart["qn-webhook"]},
			want:   "no qn-controller image was built",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pinValues([]byte(tc.values), tc.images)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
