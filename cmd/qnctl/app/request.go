package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/internal/clip"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/webhook"
)

// Defaults of a request built from a plain object.
const (
	// defaultUser is the requester when none is given.
	defaultUser = "qnctl"
	// defaultNamespace is used when neither the object nor a flag names one.
	defaultNamespace = "default"
	// evalUID is the uid of a review built from a plain object.
	evalUID = "qnctl-eval"
)

// defaultGroups are the requester's groups when none are given: what the
// apiserver adds for every authenticated user.
var defaultGroups = []string{"system:authenticated"}

// document is one input file: its name for messages and its content as JSON.
type document struct {
	Name string
	JSON []byte
}

// requestSpec is what to judge: a review or an object, plus the context
// that completes an object or overrides a review. Nil fields are unset.
type requestSpec struct {
	Input document
	// Old is the old object (UPDATE); nil when not given.
	Old       *document
	Operation string
	User      *string
	Groups    []string
	Namespace string
	Resource  string
	// Role sets the qn-role annotation on the object the webhook reads the
	// role from, as if the user had written it.
	Role string
	// OldRole sets the qn-role annotation on the old object (UPDATE), to
	// judge a change of role: the stored object's role judges the update.
	OldRole string
	DryRun  *bool
}

// readDocument reads one file ("-" is stdin) and turns it into JSON: a JSON
// file as it is (so the webhook's strict decoding sees the real bytes), a
// YAML file through a strict conversion that refuses duplicate keys.
func readDocument(name string, stdin io.Reader) (document, error) {
	name, src, err := readSource(name, stdin)
	if err != nil {
		return document{}, err
	}
	return parseDocument(name, src)
}

// readDocuments reads a file that may hold several objects, as kubectl
// writes and reads them: a multi-document YAML stream, or a kind: List
// (what `kubectl get qn -o yaml` prints). Each object is one document,
// named by where it stands in the file.
func readDocuments(name string, stdin io.Reader) ([]document, error) {
	name, src, err := readSource(name, stdin)
	if err != nil {
		return nil, err
	}
	parts := [][]byte{src}
	if t := bytes.TrimSpace(src); len(t) > 0 && t[0] != '{' {
		parts = parts[:0]
		for _, part := range yamlSeparator.Split(string(src), -1) {
			if strings.TrimSpace(stripComments(part)) != "" {
				parts = append(parts, []byte(part))
			}
		}
		if len(parts) == 0 {
			parts = [][]byte{src}
		}
	}
	var docs []document
	for i, part := range parts {
		partName := name
		if len(parts) > 1 {
			partName = fmt.Sprintf("%s (document %d)", name, i+1)
		}
		doc, err := parseDocument(partName, part)
		if err != nil {
			return nil, err
		}
		if len(parts) > 1 {
			doc.Name += objectLabel(doc.JSON)
		}
		items, err := listItems(doc)
		if err != nil {
			return nil, err
		}
		docs = append(docs, items...)
	}
	return docs, nil
}

// listItems expands a kind: List (or a typed list such as QuantumNodeList)
// into its items; any other document is itself.
func listItems(doc document) ([]document, error) {
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(doc.JSON, &list); err != nil || !strings.HasSuffix(list.Kind, "List") {
		return []document{doc}, nil
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("%s is a %s with no items; nothing to judge", doc.Name, list.Kind)
	}
	items := make([]document, 0, len(list.Items))
	for i, raw := range list.Items {
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return nil, fmt.Errorf("%s: items[%d] is not an object", doc.Name, i)
		}
		items = append(items, document{Name: fmt.Sprintf("%s: items[%d]%s", doc.Name, i, objectLabel(raw)), JSON: raw})
	}
	return items, nil
}

// objectLabel names the object of one document of several, as a person
// finds it in a cluster: " Kind namespace/name" (" Kind name" when it has
// no namespace); for an AdmissionReview, the object its request names.
// Empty when the document is no object (no apiVersion or kind).
func objectLabel(raw []byte) string {
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
		Request *struct {
			Kind      struct{ Kind string } `json:"kind"`
			Namespace string                `json:"namespace"`
			Name      string                `json:"name"`
		} `json:"request"`
	}
	if json.Unmarshal(raw, &obj) != nil {
		return ""
	}
	kind, ns, name := obj.Kind, obj.Metadata.Namespace, obj.Metadata.Name
	if obj.Kind == "AdmissionReview" && obj.Request != nil {
		kind, ns, name = obj.Request.Kind.Kind, obj.Request.Namespace, obj.Request.Name
	}
	if obj.APIVersion == "" || kind == "" {
		return ""
	}
	if ns != "" {
		name = ns + "/" + name
	}
	return " " + clip.String(strings.TrimSpace(kind+" "+name), clip.FieldBytes)
}

// readSource reads a file, or stdin for "-".
func readSource(name string, stdin io.Reader) (string, []byte, error) {
	var src []byte
	var err error
	if name == "-" {
		if stdin == nil {
			return name, nil, fmt.Errorf("stdin (-) is not available here; name a file")
		}
		name = "stdin"
		src, err = readBounded(name, stdin)
	} else {
		src, err = readFileBounded(name)
	}
	if err != nil {
		return name, nil, err
	}
	return name, src, nil
}

// maxInputBytes bounds one input file or stdin. The webhook takes at most
// 7 MiB of JSON; the same review as YAML is a little larger.
const maxInputBytes = 16 << 20

// readBounded reads at most maxInputBytes from r; more is an error, so
// /dev/zero or a runaway pipe ends in a message, not an out-of-memory crash.
func readBounded(name string, r io.Reader) ([]byte, error) {
	src, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, unwrapPathError(err))
	}
	if len(src) > maxInputBytes {
		return nil, fmt.Errorf("%s is larger than %d MiB, the most qnctl reads (an AdmissionReview is at most 7 MiB)", name, maxInputBytes>>20)
	}
	return src, nil
}

// readFileBounded is readBounded for a named file.
func readFileBounded(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, unwrapPathError(err))
	}
	defer f.Close()
	return readBounded(name, f)
}

var yamlSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// parseDocument converts src (JSON or YAML, one document) to JSON.
func parseDocument(name string, src []byte) (document, error) {
	trimmed := bytes.TrimSpace(src)
	if len(trimmed) == 0 {
		return document{}, fmt.Errorf("%s is empty; pass an AdmissionReview or a Kubernetes object (JSON or YAML)", name)
	}
	if trimmed[0] == '{' {
		if !json.Valid(trimmed) {
			var v any
			err := json.Unmarshal(trimmed, &v)
			return document{}, fmt.Errorf("%s is not valid JSON: %s", name, jsonErrorAt(trimmed, err))
		}
		return document{Name: name, JSON: trimmed}, nil
	}
	docs := 0
	for _, part := range yamlSeparator.Split(string(src), -1) {
		if strings.TrimSpace(stripComments(part)) != "" {
			docs++
		}
	}
	if docs > 1 {
		return document{}, fmt.Errorf("%s holds %d YAML documents; pass one AdmissionReview or object per file", name, docs)
	}
	js, err := yaml.YAMLToJSONStrict(src)
	if err != nil {
		return document{}, yamlDocError(name, err)
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || t[0] != '{' {
		return document{}, fmt.Errorf("%s is not a YAML mapping; pass an AdmissionReview or a Kubernetes object", name)
	}
	return document{Name: name, JSON: js}, nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// jsonErrorAt adds the line of a JSON syntax error.
func jsonErrorAt(src []byte, err error) string {
	var se *json.SyntaxError
	if e, ok := err.(*json.SyntaxError); ok {
		se = e
	}
	if se == nil {
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	line := 1 + bytes.Count(src[:min(int(se.Offset), len(src))], []byte("\n"))
	return fmt.Sprintf("line %d: %s", line, se.Error())
}

// typeMeta reads apiVersion and kind of a JSON document.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// isReview reports whether a document is an AdmissionReview.
func isReview(doc document) bool {
	var tm typeMeta
	_ = json.Unmarshal(doc.JSON, &tm)
	return tm.Kind == "AdmissionReview"
}

// reviewBytes builds the AdmissionReview the webhook would receive: a
// review as given (re-encoded only when a flag overrides a field), or a
// review around a plain object the way the apiserver builds one.
func (s *requestSpec) reviewBytes() ([]byte, error) {
	if isReview(s.Input) {
		return s.fromReview()
	}
	return s.fromObject()
}

func (s *requestSpec) fromReview() ([]byte, error) {
	rev, err := webhook.DecodeReview(s.Input.JSON)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Input.Name, err)
	}
	if s.Resource != "" {
		return nil, usagef("--resource applies to a plain object; %s is an AdmissionReview that names its resource", s.Input.Name)
	}
	r := rev.Request
	changed := false
	if s.Operation != "" {
		op, err := parseOperation(s.Operation)
		if err != nil {
			return nil, err
		}
		r.Operation, changed = op, true
	}
	if s.User != nil {
		r.UserInfo.Username, changed = *s.User, true
	}
	if s.Groups != nil {
		r.UserInfo.Groups, changed = s.Groups, true
	}
	if s.Namespace != "" {
		r.Namespace, changed = s.Namespace, true
	}
	if s.DryRun != nil {
		r.DryRun, changed = s.DryRun, true
	}
	if s.Old != nil {
		r.OldObject, changed = runtime.RawExtension{Raw: s.Old.JSON}, true
	}
	if s.Role != "" || s.OldRole != "" {
		s.setRoles(r)
		changed = true
	}
	if !changed {
		return s.Input.JSON, nil
	}
	return json.Marshal(rev)
}

func (s *requestSpec) fromObject() ([]byte, error) {
	var obj struct {
		typeMeta
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(s.Input.JSON, &obj); err != nil {
		return nil, fmt.Errorf("%s is not a Kubernetes object: %s", s.Input.Name, strings.TrimPrefix(err.Error(), "json: "))
	}
	if obj.APIVersion == "" || obj.Kind == "" {
		return nil, fmt.Errorf("%s has no apiVersion and kind; pass an AdmissionReview or a Kubernetes object", s.Input.Name)
	}
	gv, err := schema.ParseGroupVersion(obj.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("%s: apiVersion %q: %w", s.Input.Name, obj.APIVersion, err)
	}
	op := admissionv1.Create
	if s.Old != nil {
		op = admissionv1.Update
	}
	if s.Operation != "" {
		if op, err = parseOperation(s.Operation); err != nil {
			return nil, err
		}
	}
	ns := s.Namespace
	if ns == "" {
		ns = obj.Metadata.Namespace
	}
	if ns == "" {
		ns = defaultNamespace
	}
	resource := s.Resource
	if resource == "" {
		resource = resourceFor(gv.Group, obj.Kind)
	}
	user := defaultUser
	if s.User != nil {
		user = *s.User
	}
	groups := defaultGroups
	if s.Groups != nil {
		groups = s.Groups
	}
	kind := metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: obj.Kind}
	gvr := metav1.GroupVersionResource{Group: gv.Group, Version: gv.Version, Resource: resource}
	r := &admissionv1.AdmissionRequest{
		UID:             types.UID(evalUID),
		Kind:            kind,
		Resource:        gvr,
		RequestKind:     &kind,
		RequestResource: &gvr,
		Name:            obj.Metadata.Name,
		Namespace:       ns,
		Operation:       op,
		UserInfo:        authenticationv1.UserInfo{Username: user, Groups: groups},
		DryRun:          s.DryRun,
	}
	if r.DryRun == nil {
		r.DryRun = new(bool)
	}
	switch op {
	case admissionv1.Delete:
		// A DELETE carries only the object being deleted, as oldObject.
		if s.Old != nil {
			return nil, usagef("--old does not apply to DELETE: the object in %s is the one being deleted", s.Input.Name)
		}
		r.OldObject = runtime.RawExtension{Raw: s.Input.JSON}
	default:
		r.Object = runtime.RawExtension{Raw: s.Input.JSON}
		if s.Old != nil {
			r.OldObject = runtime.RawExtension{Raw: s.Old.JSON}
		}
	}
	s.setRoles(r)
	return json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  r,
	})
}

// resourceFor names the resource of a kind: the project's own kinds
// exactly, any other kind by the usual lowercase plural (override with
// --resource when that guess is wrong).
func resourceFor(group, kind string) string {
	if group == "qn.dev" && kind == "QuantumNode" {
		return "quantumnodes"
	}
	k := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(k, "s"), strings.HasSuffix(k, "x"), strings.HasSuffix(k, "ch"), strings.HasSuffix(k, "sh"):
		return k + "es"
	case strings.HasSuffix(k, "y") && !strings.HasSuffix(k, "ay") && !strings.HasSuffix(k, "ey") && !strings.HasSuffix(k, "oy"):
		return strings.TrimSuffix(k, "y") + "ies"
	}
	return k + "s"
}

// Operations the apiserver sends to admission webhooks.
var operations = []string{"CREATE", "UPDATE", "DELETE", "CONNECT"}

func parseOperation(s string) (admissionv1.Operation, error) {
	op := strings.ToUpper(s)
	for _, o := range operations {
		if op == o {
			return admissionv1.Operation(op), nil
		}
	}
	return "", usagef("operation %q is not one of %s", s, strings.Join(operations, ", "))
}

// setRoles writes the qn-role annotations: Role into the object (the old
// object of a DELETE, which carries no object), OldRole into the old
// object.
func (s *requestSpec) setRoles(r *admissionv1.AdmissionRequest) {
	if s.Role != "" {
		target := &r.Object
		if len(bytes.TrimSpace(r.Object.Raw)) == 0 || string(bytes.TrimSpace(r.Object.Raw)) == "null" {
			target = &r.OldObject
		}
		setRole(target, s.Role)
	}
	if s.OldRole != "" && len(bytes.TrimSpace(r.OldObject.Raw)) > 0 {
		setRole(&r.OldObject, s.OldRole)
	}
}

// setRole writes the qn-role annotation into target. An object that does
// not decode strictly is left alone: the webhook refuses it anyway, and
// rewriting it would hide the problem (a duplicate key, say).
func setRole(target *runtime.RawExtension, role string) {
	var obj map[string]any
	strictErrs, err := kjson.UnmarshalStrict(target.Raw, &obj, kjson.DisallowDuplicateFields)
	if err != nil || len(strictErrs) > 0 || obj == nil {
		return
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		if obj["metadata"] != nil {
			return
		}
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	ann, ok := meta["annotations"].(map[string]any)
	if !ok {
		if meta["annotations"] != nil {
			return
		}
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann[policies.RoleAnnotation] = role
	if raw, err := json.Marshal(obj); err == nil {
		target.Raw = raw
	}
}

var yamlLineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// yamlDocError says where a YAML document is broken: "file:line: ...".
func yamlDocError(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimSpace(strings.TrimPrefix(msg, "unmarshal errors:"))
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s:%s: not valid YAML: %s", name, m[1], m[2])
	}
	return fmt.Errorf("%s is not valid YAML: %s", name, msg)
}
