package chart

import (
	"context"
	"fmt"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quantumnode/qn-admission/policies"
)

// valuesBlock matches the values files docs/install.md shows: fenced YAML
// whose first line is "# values.yaml…".
var valuesBlock = regexp.MustCompile("(?s)```yaml\n(# values\\.yaml[^\n]*\n.*?)```")

// Every values file in docs/install.md installs: the schema accepts it, the
// templates render it, and a policy ConfigMap it makes is a set qn-webhook
// loads.
func TestInstallDocValuesRender(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(chartrender.Dir(), "..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := valuesBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 4 {
		t.Fatalf("found %d values blocks in docs/install.md, want at least 4", len(blocks))
	}
	for _, b := range blocks {
		name, _, _ := strings.Cut(b[1], "\n")
		t.Run(name, func(t *testing.T) {
			rel, err := chartrender.Render("qn-admission", "qn-system", values(t, b[1]))
			if err != nil {
				t.Fatalf("%v\n%s", err, b[1])
			}
			for _, obj := range rel.Objects {
				if obj.GetKind() != "ConfigMap" {
					continue
				}
				data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
				dir := fstest.MapFS{}
				for file, content := range data {
					dir[file] = &fstest.MapFile{Data: []byte(content)}
				}
				if _, err := policies.Load(context.Background(), dir, policies.LoadOptions{}); err != nil {
					t.Errorf("qn-webhook would refuse the ConfigMap: %v", err)
				}
			}
		})
	}
}

// docText is a document with its whitespace runs made single spaces, so
// a phrase is found wherever the lines of its paragraph break.
func docText(t *testing.T, rel ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{chartrender.Dir(), "..", ".."}, rel...)...))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// The chart's README says what the chart installs: every resource its
// webhook configurations register for, and the number of alerts its
// PrometheusRule holds.
func TestChartReadmeSaysWhatTheChartRegistersAndAlertsOn(t *testing.T) {
	readme := docText(t, "charts", "qn-admission", "README.md")
	rel := render(t, "")
	resources := map[string]bool{}
	for _, w := range validating(t, rel).Webhooks {
		for _, r := range w.Rules {
			for _, res := range r.Resources {
				resources[res] = true
			}
		}
	}
	for _, w := range mutating(t, rel).Webhooks {
		for _, r := range w.Rules {
			for _, res := range r.Resources {
				resources[res] = true
			}
		}
	}
	if len(resources) < 2 {
		t.Fatalf("the webhook configurations register for %v; want QuantumNodes and HorizontalQNScalers", resources)
	}
	for res := range resources {
		if !strings.Contains(readme, "`"+res+"`") {
			t.Errorf("charts/qn-admission/README.md does not name `%s`, which the webhook configurations register for", res)
		}
	}
	if strings.Contains(readme, "`quantumnodes` only") {
		t.Error("charts/qn-admission/README.md says the webhooks cover quantumnodes only")
	}

	rule := render(t, "metrics: {prometheusRule: {enabled: true}}").Find("PrometheusRule", fullname)
	if rule == nil {
		t.Fatal("no PrometheusRule")
	}
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	alerts := 0
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			if _, ok := r.(map[string]any)["alert"]; ok {
				alerts++
			}
		}
	}
	if want := fmt.Sprintf("`metrics.prometheusRule.enabled` (%d alerts,", alerts); !strings.Contains(readme, want) {
		t.Errorf("charts/qn-admission/README.md does not say %q: the PrometheusRule holds %d alerts", want, alerts)
	}
}

// docs/install.md's table of what the chart installs names every CRD of
// the chart's crds/.
func TestInstallDocListsEveryCRD(t *testing.T) {
	install := docText(t, "docs", "install.md")
	var row string
	for _, l := range strings.Split(install, "| CRDs ") {
		if strings.Contains(l, "(`crds/`)") {
			row, _, _ = strings.Cut(l, "(`crds/`)")
			break
		}
	}
	if row == "" {
		t.Fatal("docs/install.md has no \"| CRDs … (`crds/`)\" row")
	}
	files, err := filepath.Glob(filepath.Join(chartrender.Dir(), "crds", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("crds: %v %v", files, err)
	}
	for _, f := range files {
		// qn.dev_quantumnodes.yaml holds quantumnodes.qn.dev.
		group, plural, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".yaml"), "_")
		if name := plural + "." + group; !strings.Contains(row, "`"+name+"`") {
			t.Errorf("docs/install.md's CRD row does not name `%s` (%s): %s", name, filepath.Base(f), row)
		}
	}
}
