package chart

import (
	"context"
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
	doc, err := os.ReadFile(filepath.Join(Dir(), "..", "..", "docs", "install.md"))
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
			rel, err := Render("qn-admission", "qn-system", values(t, b[1]))
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
