package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"
)

// Kyverno's test folders: a kyverno-test.yaml (cli.kyverno.io/v1alpha1
// Test, or the older format without apiVersion) names policy files,
// resource files, an optional values file and the result it expects of
// each (policy, rule, resource). This file reads them; kyvernorun.go
// judges them.

// kyvernoTestFile is the file name Kyverno's CLI looks for (kyverno test
// --file-name).
const kyvernoTestFile = "kyverno-test.yaml"

// kyvernoTestAPI is the apiVersion of Kyverno's test and values files.
const kyvernoTestAPI = "cli.kyverno.io/v1alpha1"

// kyvernoTest is one document of a kyverno-test.yaml.
type kyvernoTest struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   kyvernoMeta `json:"metadata"`
	// Name is the older format's test name.
	Name      string             `json:"name"`
	Policies  []string           `json:"policies"`
	Resources []string           `json:"resources"`
	Variables string             `json:"variables"`
	Values    *kyvernoValuesSpec `json:"values"`
	UserInfo  string             `json:"userinfo"`
	Results   []kyvernoRow       `json:"results"`

	// What a Kyverno test may also declare and qnctl does not run; each is
	// refused by name when set.
	JSONPayload          string            `json:"jsonPayload"`
	JSONPayloads         []string          `json:"jsonPayloads"`
	HTTPPayloads         []string          `json:"httpPayloads"`
	EnvoyPayloads        []string          `json:"envoyPayloads"`
	TargetResources      []string          `json:"targetResources"`
	ParamResources       []string          `json:"paramResources"`
	Exceptions           []string          `json:"exceptions"`
	Context              string            `json:"context"`
	ClusterResources     []string          `json:"clusterResources"`
	APICallResponses     []json.RawMessage `json:"apiCallResponses"`
	GlobalContextEntries []json.RawMessage `json:"globalContextEntries"`
}

// kyvernoMeta is a file's metadata: Kyverno's CLI takes a whole
// ObjectMeta and reads only the name.
type kyvernoMeta map[string]any

// name is metadata.name.
func (m kyvernoMeta) name() string {
	n, _ := m["name"].(string)
	return n
}

// kyvernoRow is one expected result: a policy's rule on resources.
type kyvernoRow struct {
	Policy        string                `json:"policy"`
	Rule          string                `json:"rule"`
	Resources     []string              `json:"resources"`
	ResourceSpecs []kyvernoResourceSpec `json:"resourceSpecs"`
	Kind          string                `json:"kind"`
	Result        string                `json:"result"`
	// Operation is CREATE (default), UPDATE or DELETE.
	Operation string `json:"operation"`
	// The older format: one resource, its namespace, and status for result.
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Status    string `json:"status"`

	// Refused: what mutate, generate and the CEL policy kinds other than
	// ValidatingPolicy and ValidatingAdmissionPolicy need. The two flags
	// of those are read and not needed: Kyverno's CLI knows a CEL policy
	// by its kind.
	PatchedResources            string   `json:"patchedResources"`
	PatchedResource             string   `json:"patchedResource"`
	GeneratedResource           string   `json:"generatedResource"`
	GeneratedResources          []string `json:"generatedResources"`
	CloneSourceResource         string   `json:"cloneSourceResource"`
	FailOnMissingResources      bool     `json:"failOnMissingResources"`
	IsValidatingAdmissionPolicy bool     `json:"isValidatingAdmissionPolicy"`
	IsMutatingAdmissionPolicy   bool     `json:"isMutatingAdmissionPolicy"`
	IsValidatingPolicy          bool     `json:"isValidatingPolicy"`
	IsDeletingPolicy            bool     `json:"isDeletingPolicy"`
	IsImageValidatingPolicy     bool     `json:"isImageValidatingPolicy"`
	IsGeneratingPolicy          bool     `json:"isGeneratingPolicy"`
	IsMutatingPolicy            bool     `json:"isMutatingPolicy"`
}

// kyvernoResourceSpec names a resource by group, version, namespace and
// name instead of by name alone.
type kyvernoResourceSpec struct {
	Group       string `json:"group"`
	Version     string `json:"version"`
	Kind        string `json:"kind"`
	Namespace   string `json:"namespace"`
	Subresource string `json:"subresource"`
	Name        string `json:"name"`
}

// kyvernoValuesSpec is a values file's content (or a test's values:).
type kyvernoValuesSpec struct {
	GlobalValues       map[string]any         `json:"globalValues"`
	Policies           []kyvernoPolicyValues  `json:"policies"`
	NamespaceSelectors []kyvernoNamespaceVals `json:"namespaceSelector"`
	Namespaces         []json.RawMessage      `json:"namespaces"`
	Subresources       []json.RawMessage      `json:"subresources"`
}

type kyvernoPolicyValues struct {
	Name      string `json:"name"`
	Resources []struct {
		Name   string         `json:"name"`
		Values map[string]any `json:"values"`
	} `json:"resources"`
	Rules []struct {
		Name          string           `json:"name"`
		Values        map[string]any   `json:"values"`
		ForeachValues map[string][]any `json:"foreachValues"`
	} `json:"rules"`
}

type kyvernoNamespaceVals struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// kyvernoValuesFile is a values file: cli.kyverno.io/v1alpha1 Values, or
// the older format without apiVersion.
type kyvernoValuesFile struct {
	APIVersion        string      `json:"apiVersion"`
	Kind              string      `json:"kind"`
	Metadata          kyvernoMeta `json:"metadata"`
	kyvernoValuesSpec `json:",inline"`
}

// kyvernoUserInfoFile is a userinfo file: the requester of every request.
type kyvernoUserInfoFile struct {
	APIVersion   string      `json:"apiVersion"`
	Kind         string      `json:"kind"`
	Metadata     kyvernoMeta `json:"metadata"`
	Roles        []string    `json:"roles"`
	ClusterRoles []string    `json:"clusterRoles"`
	UserInfo     struct {
		Username string              `json:"username"`
		UID      string              `json:"uid"`
		Groups   []string            `json:"groups"`
		Extra    map[string][]string `json:"extra"`
	} `json:"userInfo"`
	DryRun bool `json:"dryRun"`
}

// kyvernoTestDoc is one test as read, with where it stands.
type kyvernoTestDoc struct {
	// Path is the test file as found; Dir is its folder, against which
	// its paths resolve.
	Path, Dir string
	// Line is the document's first line; RowLines the line of each row.
	Line     int
	RowLines []int
	Spec     kyvernoTest
}

// Name is the test's name for reports.
func (d *kyvernoTestDoc) Name() string {
	if n := d.Spec.Metadata.name(); n != "" {
		return n
	}
	if d.Spec.Name != "" {
		return d.Spec.Name
	}
	return filepath.Base(d.Dir)
}

// findKyvernoTests lists the files named name under dir, as kyverno test
// does (hidden folders aside), in lexical order.
func findKyvernoTests(dir, name string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == name {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// readKyvernoTests reads every test document of one kyverno-test.yaml,
// strictly: an unknown field is an error naming the file and line, as
// Kyverno's CLI refuses it.
func readKyvernoTests(path string) ([]*kyvernoTestDoc, error) {
	src, err := readFileBounded(path)
	if err != nil {
		return nil, err
	}
	var out []*kyvernoTestDoc
	err = eachYAMLDocument(path, src, func(n *yaml.Node, js []byte) error {
		doc := &kyvernoTestDoc{Path: path, Dir: filepath.Dir(path), Line: n.Line}
		if err := strictJSON(js, &doc.Spec); err != nil {
			return fmt.Errorf("%s:%d: %v", path, n.Line, err)
		}
		doc.RowLines = rowLines(n, len(doc.Spec.Results))
		if err := doc.check(); err != nil {
			return err
		}
		out = append(out, doc)
		return nil
	})
	return out, err
}

// eachYAMLDocument calls fn with each non-empty document of src, as a
// node (for line numbers) and as JSON (for strict decoding).
func eachYAMLDocument(path string, src []byte, fn func(n *yaml.Node, js []byte) error) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: not valid YAML: %v", path, err)
		}
		if len(n.Content) == 0 || n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null" {
			continue
		}
		root := n.Content[0]
		if root.Kind != yaml.MappingNode {
			return fmt.Errorf("%s:%d: a document must be a mapping", path, root.Line)
		}
		var v any
		if err := root.Decode(&v); err != nil {
			return fmt.Errorf("%s:%d: %v", path, root.Line, err)
		}
		js, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s:%d: %v", path, root.Line, err)
		}
		if err := fn(root, js); err != nil {
			return err
		}
	}
}

// strictJSON decodes js into v, refusing unknown and duplicate fields.
func strictJSON(js []byte, v any) error {
	strict, err := kjson.UnmarshalStrict(js, v, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = strings.TrimPrefix(e.Error(), "json: ")
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// rowLines is the line of each item of the document's results list.
func rowLines(root *yaml.Node, n int) []int {
	lines := make([]int, n)
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "results" || root.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for j, item := range root.Content[i+1].Content {
			if j < n {
				lines[j] = item.Line
			}
		}
	}
	for i := range lines {
		if lines[i] == 0 {
			lines[i] = root.Line
		}
	}
	return lines
}

// check refuses what qnctl does not run, naming the field and line.
func (d *kyvernoTestDoc) check() error {
	s := &d.Spec
	at := fmt.Sprintf("%s:%d", d.Path, d.Line)
	old := s.APIVersion == ""
	switch {
	case old && s.Kind != "":
		return fmt.Errorf("%s: kind %q without apiVersion; a Kyverno test is apiVersion: %s, kind: Test", at, s.Kind, kyvernoTestAPI)
	case !old && (s.APIVersion != kyvernoTestAPI || s.Kind != "Test"):
		return fmt.Errorf("%s: %s %s is not a Kyverno test (apiVersion: %s, kind: Test)", at, s.APIVersion, s.Kind, kyvernoTestAPI)
	case !old && s.Name != "":
		return fmt.Errorf("%s: name: unknown field in a %s Test (the older format's; use metadata.name)", at, kyvernoTestAPI)
	}
	refused := map[string]bool{
		"jsonPayload":          s.JSONPayload != "",
		"jsonPayloads":         len(s.JSONPayloads) > 0,
		"httpPayloads":         len(s.HTTPPayloads) > 0,
		"envoyPayloads":        len(s.EnvoyPayloads) > 0,
		"targetResources":      len(s.TargetResources) > 0,
		"paramResources":       len(s.ParamResources) > 0,
		"exceptions":           len(s.Exceptions) > 0,
		"context":              s.Context != "",
		"clusterResources":     len(s.ClusterResources) > 0,
		"apiCallResponses":     len(s.APICallResponses) > 0,
		"globalContextEntries": len(s.GlobalContextEntries) > 0,
	}
	for _, f := range sortedKeys(refused) {
		if refused[f] {
			return fmt.Errorf("%s: %s: not supported: qnctl test runs ClusterPolicies' and Policies' validate rules, ValidatingPolicies and ValidatingAdmissionPolicies on resources, without a cluster, parameters, payloads, exceptions or mocked API calls", at, f)
		}
	}
	if len(s.Policies) == 0 {
		return fmt.Errorf("%s: policies: a test names at least one policy file", at)
	}
	for i := range s.Results {
		if err := d.checkRow(i, old); err != nil {
			return err
		}
	}
	return nil
}

func (d *kyvernoTestDoc) checkRow(i int, old bool) error {
	r := &d.Spec.Results[i]
	at := fmt.Sprintf("%s:%d: results[%d]", d.Path, d.RowLines[i], i)
	if !old {
		for f, set := range map[string]bool{"resource": r.Resource != "", "namespace": r.Namespace != "", "status": r.Status != "", "patchedResource": r.PatchedResource != ""} {
			if set {
				return fmt.Errorf("%s: %s: unknown field in a %s Test (the older format's)", at, f, kyvernoTestAPI)
			}
		}
	}
	if r.Result == "" {
		r.Result = r.Status
	}
	if r.Resource != "" {
		name := r.Resource
		if r.Namespace != "" {
			name = r.Namespace + "/" + name
		}
		r.Resources = append(r.Resources, name)
	}
	if r.PatchedResources == "" {
		r.PatchedResources = r.PatchedResource
	}
	switch {
	case r.PatchedResources != "":
		return fmt.Errorf("%s: patchedResources: not supported: qnctl judges validate rules, not mutations", at)
	case r.GeneratedResource != "" || len(r.GeneratedResources) > 0 || r.CloneSourceResource != "":
		return fmt.Errorf("%s: generatedResource: not supported: qnctl judges validate rules, not generate rules", at)
	case r.IsMutatingAdmissionPolicy || r.IsDeletingPolicy || r.IsImageValidatingPolicy || r.IsGeneratingPolicy || r.IsMutatingPolicy:
		return fmt.Errorf("%s: a row of a MutatingAdmissionPolicy, MutatingPolicy, GeneratingPolicy, DeletingPolicy or ImageValidatingPolicy: not supported: qnctl test runs the rows of ClusterPolicies, Policies, ValidatingPolicies and ValidatingAdmissionPolicies", at)
	case r.Policy == "":
		return fmt.Errorf("%s: policy: required", at)
	}
	switch r.Result {
	case "pass", "fail", "skip", "warn", "error":
	case "":
		return fmt.Errorf("%s: result: required (pass, fail, skip, warn or error)", at)
	default:
		return fmt.Errorf("%s: result %q is not one of pass, fail, skip, warn, error", at, r.Result)
	}
	switch r.Operation {
	case "", "CREATE", "UPDATE", "DELETE":
	default:
		return fmt.Errorf("%s: operation %q is not one of CREATE, UPDATE, DELETE", at, r.Operation)
	}
	for _, s := range r.ResourceSpecs {
		if s.Subresource != "" {
			return fmt.Errorf("%s: resourceSpecs: subresource: not supported", at)
		}
	}
	return nil
}

// readKyvernoValues reads a values file.
func readKyvernoValues(path string) (*kyvernoValuesSpec, error) {
	src, err := readFileBounded(path)
	if err != nil {
		return nil, err
	}
	var out *kyvernoValuesSpec
	err = eachYAMLDocument(path, src, func(n *yaml.Node, js []byte) error {
		if out != nil {
			return fmt.Errorf("%s:%d: a values file holds one document", path, n.Line)
		}
		var f kyvernoValuesFile
		if err := strictJSON(js, &f); err != nil {
			return fmt.Errorf("%s:%d: %v", path, n.Line, err)
		}
		// Kyverno's CLI checks the apiVersion, not the kind (its own
		// tests have kind: Value).
		if f.APIVersion != "" && f.APIVersion != kyvernoTestAPI {
			return fmt.Errorf("%s:%d: %s %s is not a Kyverno values file (apiVersion: %s, kind: Values)", path, n.Line, f.APIVersion, f.Kind, kyvernoTestAPI)
		}
		out = &f.kyvernoValuesSpec
		return nil
	})
	if err == nil && out == nil {
		out = &kyvernoValuesSpec{}
	}
	return out, err
}

// readKyvernoUserInfo reads a userinfo file.
func readKyvernoUserInfo(path string) (*kyvernoUserInfoFile, error) {
	src, err := readFileBounded(path)
	if err != nil {
		return nil, err
	}
	var out *kyvernoUserInfoFile
	err = eachYAMLDocument(path, src, func(n *yaml.Node, js []byte) error {
		var f kyvernoUserInfoFile
		if err := strictJSON(js, &f); err != nil {
			return fmt.Errorf("%s:%d: %v", path, n.Line, err)
		}
		if f.APIVersion != "" && (f.APIVersion != kyvernoTestAPI || f.Kind != "UserInfo") {
			return fmt.Errorf("%s:%d: %s %s is not a Kyverno userinfo file (apiVersion: %s, kind: UserInfo)", path, n.Line, f.APIVersion, f.Kind, kyvernoTestAPI)
		}
		if len(f.Roles) > 0 || len(f.ClusterRoles) > 0 {
			return fmt.Errorf("%s:%d: roles and clusterRoles: not supported: they need the cluster's RBAC bindings", path, n.Line)
		}
		out = &f
		return nil
	})
	if err == nil && out == nil {
		err = fmt.Errorf("%s: no userinfo document", path)
	}
	return out, err
}

// testPath resolves a path a test names: relative to the test's folder.
func (d *kyvernoTestDoc) testPath(p string) (string, error) {
	if strings.Contains(p, "://") {
		return "", fmt.Errorf("%s: %s: not supported: qnctl test reads local files only", d.Path, p)
	}
	if filepath.IsAbs(p) {
		return p, nil
	}
	return filepath.Join(d.Dir, p), nil
}

// yamlFilesUnder is path itself, or the *.yaml, *.yml and *.json files
// under it when it is a folder.
func yamlFilesUnder(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var out []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(p) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				out = append(out, p)
			}
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
