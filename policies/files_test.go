package policies

import (
	"context"
	"io/fs"
	"slices"
	"sort"
	"testing"
	"testing/fstest"

	"github.com/quantumnode/qn-admission/rego"
)

// openRecorder is an fs.FS that records every file (not directory) opened.
type openRecorder struct {
	fs.FS
	opened []string
}

func (r *openRecorder) Open(name string) (fs.File, error) {
	f, err := r.FS.Open(name)
	if err == nil {
		if st, serr := f.Stat(); serr == nil && !st.IsDir() {
			r.opened = append(r.opened, name)
		}
	}
	return f, err
}

// TestEveryFileLoadReadsIsAPolicyFile holds IsPolicyFile (what a reload
// hashes and watches) and Load (what it reads) together: a file Load reads
// that IsPolicyFile leaves out would change without a reload.
func TestEveryFileLoadReadsIsAPolicyFile(t *testing.T) {
	m := fstest.MapFS{}
	mustDo(t, fs.WalkDir(rego.Bundled(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(rego.Bundled(), p)
		m[p] = &fstest.MapFile{Data: b}
		return err
	}))
	for name, content := range map[string]string{
		"data.json":                  `{"zones": ["a"]}`,
		"data.yaml":                  "regions: [b]\n",
		"lib/extra.rego":             "package extra\n\nanswer := 42\n",
		"lib/extra.pattern.yaml":     "not: a pattern\n",
		"README.md":                  "docs",
		"lib/notes.txt":              "notes",
		"lib/roles.yaml":             "a role table below the top is not read\n",
		"lib/data.json":              "{}",
		"roles.yaml.orig":            "a backup",
		"fixtures/review.rego.json":  "{}",
		"fixtures/pattern.yaml.orig": "x",
		"fixtures/node.yaml":         "apiVersion: qn.dev/v1alpha1\nkind: QuantumNode\n",
		"lib/configmap.yml":          "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
		"other.yaml":                 "just: yaml\n",
	} {
		m[name] = &fstest.MapFile{Data: []byte(content)}
	}
	rec := &openRecorder{FS: m}
	_, _ = Load(context.Background(), rec, LoadOptions{SkipTests: true}) // read, whatever it makes of them
	sort.Strings(rec.opened)
	for _, p := range rec.opened {
		if !IsPolicyFile(p) {
			t.Errorf("Load read %s, which IsPolicyFile leaves out: a change to it would not reload the set", p)
		}
	}
	for p := range m {
		if IsPolicyFile(p) && !slices.Contains(rec.opened, p) {
			t.Errorf("IsPolicyFile(%q) is true but Load did not read it (read: %v)", p, rec.opened)
		}
	}
}
