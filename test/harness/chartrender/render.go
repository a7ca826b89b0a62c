// Package chartrender renders the Helm chart in charts/qn-admission with
// Helm's own packages (the code behind `helm template`), for the suites
// that test the chart (test/chart), build its images (test/image) and
// install it on a real node (test/cluster): one renderer, so no suite
// imports another.
package chartrender

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/quantumnode/qn-admission/test/harness"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// KubeVersion is the Kubernetes version the chart is rendered for: the one
// of the test kube-apiserver (hack/k8s-bins.sh).
const KubeVersion = "v1.36.3"

// Dir is the chart's directory in the checkout.
func Dir() string {
	return filepath.Join(harness.ModuleRoot(), "charts", "qn-admission")
}

// Load reads the chart from Dir.
func Load() (*chart.Chart, error) {
	ch, err := loader.LoadDir(Dir())
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", Dir(), err)
	}
	return ch, nil
}

// Capabilities are those of the test kube-apiserver.
func Capabilities() *chartutil.Capabilities {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "36"}
	return caps
}

// Release is one rendering of the chart, as `helm install` would send it.
type Release struct {
	// CRDs are the files of crds/, which Helm installs before anything else.
	CRDs []string
	// Manifests maps each template to what it rendered (NOTES.txt excluded).
	Manifests map[string]string
	// Objects are every rendered object, CRDs first, then by template name
	// and position.
	Objects []*unstructured.Unstructured
	// Notes is the rendered NOTES.txt.
	Notes string
}

// Render renders the chart as release name in namespace with values laid
// over values.yaml, checking them against values.schema.json first, exactly
// as `helm install --dry-run` does.
func Render(name, namespace string, values map[string]any) (*Release, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	opts := chartutil.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(ch, values, opts, Capabilities())
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	rel := &Release{Manifests: map[string]string{}}
	for _, crd := range ch.CRDObjects() {
		rel.CRDs = append(rel.CRDs, string(crd.File.Data))
		objs, err := decode(crd.Filename, string(crd.File.Data))
		if err != nil {
			return nil, err
		}
		rel.Objects = append(rel.Objects, objs...)
	}
	var files []string
	for file, content := range out {
		if strings.HasSuffix(file, "NOTES.txt") {
			rel.Notes = content
			continue
		}
		if strings.TrimSpace(content) == "" {
			continue
		}
		rel.Manifests[file] = content
		files = append(files, file)
	}
	sort.Strings(files)
	for _, file := range files {
		objs, err := decode(file, rel.Manifests[file])
		if err != nil {
			return nil, err
		}
		rel.Objects = append(rel.Objects, objs...)
	}
	return rel, nil
}

// decode splits a rendered file into its objects, in order.
func decode(file, content string) ([]*unstructured.Unstructured, error) {
	docs := releaseutil.SplitManifests(content)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var objs []*unstructured.Unstructured
	for _, k := range keys {
		doc := docs[k]
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", file, err, doc)
		}
		if obj.Object == nil {
			continue // only comments
		}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" {
			return nil, fmt.Errorf("%s: an object without apiVersion or kind:\n%s", file, doc)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// YAML joins the release's objects into one multi-document stream, for
// kubectl.
func (r *Release) YAML() (string, error) {
	var b strings.Builder
	for _, obj := range r.Objects {
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return "", err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.String(), nil
}

// Find returns the one object of kind named name, or nil.
func (r *Release) Find(kind, name string) *unstructured.Unstructured {
	for _, obj := range r.Objects {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj
		}
	}
	return nil
}

// Kinds counts the rendered objects by kind.
func (r *Release) Kinds() map[string]int {
	kinds := map[string]int{}
	for _, obj := range r.Objects {
		kinds[obj.GetKind()]++
	}
	return kinds
}
