package app

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/dialect"
	"github.com/quantumnode/qn-admission/policies/dialect/admissionpolicy"
	"github.com/quantumnode/qn-admission/policies/dialect/kyverno"
)

// A Kyverno test judged the way `kyverno test` judges it: every resource
// is a CREATE request (or the row's operation) judged by every policy of
// the test, and each row compares the verdict of its policy's rule on its
// resources with the result it expects. A rule that does not apply to a
// resource gives no verdict; Kyverno's CLI passes such a row whatever it
// expects ("excluded"), and so do we, saying so.

// kyvernoResource is one resource of a test.
type kyvernoResource struct {
	Object                            map[string]any
	APIVersion, Kind, Namespace, Name string
}

// label is the resource as Kyverno's CLI prints it: apiVersion/kind/namespace/name.
func (r *kyvernoResource) label() string {
	parts := []string{r.APIVersion, r.Kind}
	if r.Namespace != "" {
		parts = append(parts, r.Namespace)
	}
	return strings.Join(append(parts, r.Name), "/")
}

// kyvernoJudged is one loaded test: its policies and resources and the
// verdicts reached so far, per operation, resource and policy.
type kyvernoJudged struct {
	doc      *kyvernoTestDoc
	policies []*kyverno.Policy
	// unscored are the policies annotated policies.kyverno.io/scored:
	// "false", whose failures Kyverno's reports (and its test) call warn.
	unscored map[*kyverno.Policy]bool
	// cel are the test's ValidatingPolicies and ValidatingAdmissionPolicies,
	// judged as kyvernocel.go says.
	cel       []*admissionpolicy.Policy
	resources []*kyvernoResource
	values    *kyvernoValuesSpec
	user      *kyvernoUserInfoFile
	verdicts  map[verdictKey][]kyverno.RuleResult
	// celResults are the CEL policies' results (policy indexes j.cel).
	celResults map[verdictKey]celResult
}

type verdictKey struct {
	op               string
	resource, policy int
}

// loadKyvernoTest reads a test's policies, resources, values and
// userinfo; an error names the file and what is not supported.
func loadKyvernoTest(doc *kyvernoTestDoc) (*kyvernoJudged, error) {
	j := &kyvernoJudged{doc: doc, verdicts: map[verdictKey][]kyverno.RuleResult{}, celResults: map[verdictKey]celResult{}}
	var err error
	if j.policies, j.cel, j.unscored, err = loadKyvernoPolicies(doc); err != nil {
		return nil, err
	}
	for _, p := range doc.Spec.Resources {
		path, err := doc.testPath(p)
		if err != nil {
			return nil, err
		}
		files, err := yamlFilesUnder(path)
		if err != nil {
			return nil, fmt.Errorf("%s: resources: %w", doc.Path, unwrapPathError(err))
		}
		for _, f := range files {
			rs, err := readKyvernoResources(f)
			if err != nil {
				return nil, err
			}
			for _, r := range rs {
				if !slices.ContainsFunc(j.resources, func(o *kyvernoResource) bool { return o.label() == r.label() }) {
					j.resources = append(j.resources, r)
				}
			}
		}
	}
	j.values = doc.Spec.Values
	if doc.Spec.Variables != "" {
		path, err := doc.testPath(doc.Spec.Variables)
		if err != nil {
			return nil, err
		}
		if j.values, err = readKyvernoValues(path); err != nil {
			return nil, unwrapPathError(err)
		}
	}
	if err := checkKyvernoValues(doc, j.values); err != nil {
		return nil, err
	}
	if doc.Spec.UserInfo != "" {
		path, err := doc.testPath(doc.Spec.UserInfo)
		if err != nil {
			return nil, err
		}
		if j.user, err = readKyvernoUserInfo(path); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// loadKyvernoPolicies reads the ClusterPolicies and Policies, and the
// ValidatingPolicies and ValidatingAdmissionPolicies (with their
// bindings), of a test's policy files with the readers the server uses.
// A document of another policy API is refused; other documents are left
// alone, as Kyverno's CLI leaves them.
func loadKyvernoPolicies(doc *kyvernoTestDoc) ([]*kyverno.Policy, []*admissionpolicy.Policy, map[*kyverno.Policy]bool, error) {
	reader, celReader := kyverno.Reader{}, admissionpolicy.Reader{}
	var docs, celDocs []dialect.Document
	var problems problem.Problems
	for _, p := range doc.Spec.Policies {
		path, err := doc.testPath(p)
		if err != nil {
			return nil, nil, nil, err
		}
		files, err := yamlFilesUnder(path)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: policies: %w", doc.Path, unwrapPathError(err))
		}
		for _, f := range files {
			src, err := readFileBounded(f)
			if err != nil {
				return nil, nil, nil, err
			}
			found, err := dialect.Documents(f, src)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s: not valid YAML: %v", f, err)
			}
			for _, d := range found {
				switch {
				case slices.Contains(reader.Kinds(), dialect.Key(d.APIVersion, d.Kind)):
					docs = append(docs, d)
				case slices.Contains(celReader.Kinds(), dialect.Key(d.APIVersion, d.Kind)):
					celDocs = append(celDocs, d)
				case slices.Contains(dialect.PolicyGroups, d.Group()):
					problems = append(problems, &problem.Problem{File: d.File, Line: d.Line, Path: "kind",
						Message: fmt.Sprintf("%s %s: not supported in a Kyverno test folder: qnctl test runs ClusterPolicies and Policies (kyverno.io/v1, v2beta1), ValidatingPolicies (policies.kyverno.io) and ValidatingAdmissionPolicies", d.APIVersion, d.Kind)})
				}
			}
		}
	}
	read, broken := reader.Read(docs)
	problems = append(problems, broken...)
	var cel []*admissionpolicy.Policy
	if len(celDocs) > 0 {
		celRead, broken := celReader.Read(celDocs)
		problems = append(problems, broken...)
		for _, p := range celRead {
			cel = append(cel, p.(*admissionpolicy.Policy))
		}
	}
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
			if p.Hint != "" {
				msgs[i] += " (" + p.Hint + ")"
			}
		}
		return nil, nil, nil, fmt.Errorf("%s: its policies do not load:\n  %s", doc.Path, strings.Join(msgs, "\n  "))
	}
	out := make([]*kyverno.Policy, 0, len(read))
	unscored := map[*kyverno.Policy]bool{}
	for _, p := range read {
		kp := p.(*kyverno.Policy)
		out = append(out, kp)
		for _, d := range docs {
			if d.File == kp.File() && d.Line == kp.Line() && annotation(d, "policies.kyverno.io/scored") == "false" {
				unscored[kp] = true
			}
		}
	}
	if len(out) == 0 && len(cel) == 0 {
		return nil, nil, nil, fmt.Errorf("%s: policies: no ClusterPolicy, Policy, ValidatingPolicy or ValidatingAdmissionPolicy in %s", doc.Path, strings.Join(doc.Spec.Policies, ", "))
	}
	return out, cel, unscored, nil
}

// annotation is metadata.annotations[key] of a document.
func annotation(d dialect.Document, key string) string {
	var doc struct {
		Metadata struct {
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
	}
	if d.Node == nil || d.Node.Decode(&doc) != nil {
		return ""
	}
	return doc.Metadata.Annotations[key]
}

// readKyvernoResources reads the resources of one file, as Kyverno's CLI
// does: every document, the items of a List, and the namespace "default"
// for a namespaced kind that names none.
func readKyvernoResources(path string) ([]*kyvernoResource, error) {
	src, err := readFileBounded(path)
	if err != nil {
		return nil, err
	}
	var out []*kyvernoResource
	for i, part := range yamlSeparator.Split(string(src), -1) {
		if strings.TrimSpace(stripComments(part)) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(part))
		if err != nil {
			return nil, fmt.Errorf("%s (document %d): not valid YAML: %v", path, i+1, err)
		}
		var obj map[string]any
		if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%s (document %d): not a Kubernetes object", path, i+1)
		}
		items := []any{obj}
		if kind, _ := obj["kind"].(string); kind == "List" {
			items, _ = obj["items"].([]any)
		}
		for _, it := range items {
			o, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s (document %d): a List item is not an object", path, i+1)
			}
			r := &kyvernoResource{Object: o}
			r.APIVersion, _ = o["apiVersion"].(string)
			r.Kind, _ = o["kind"].(string)
			if r.APIVersion == "" || r.Kind == "" {
				return nil, fmt.Errorf("%s (document %d): a resource has an apiVersion and a kind", path, i+1)
			}
			meta, _ := o["metadata"].(map[string]any)
			if meta == nil {
				meta = map[string]any{}
				o["metadata"] = meta
			}
			r.Name, _ = meta["name"].(string)
			r.Namespace, _ = meta["namespace"].(string)
			if r.Namespace == "" && !clusterScoped(r.APIVersion, r.Kind) {
				r.Namespace = defaultNamespace
				meta["namespace"] = defaultNamespace
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// clusterScoped says a kind has no namespace: the built-in cluster-scoped
// kinds Kyverno's CLI knows. Any other kind, a custom resource included,
// is namespaced for it.
func clusterScoped(apiVersion, kind string) bool {
	group := ""
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		group = g
	}
	return slices.Contains(clusterScopedKinds[group], kind)
}

var clusterScopedKinds = map[string][]string{
	"":                             {"ComponentStatus", "Namespace", "Node", "PersistentVolume"},
	"admissionregistration.k8s.io": {"MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"},
	"apiextensions.k8s.io":         {"CustomResourceDefinition"},
	"apiregistration.k8s.io":       {"APIService"},
	"authentication.k8s.io":        {"SelfSubjectReview", "TokenReview"},
	"authorization.k8s.io":         {"SelfSubjectAccessReview", "SelfSubjectRulesReview", "SubjectAccessReview"},
	"certificates.k8s.io":          {"CertificateSigningRequest"},
	"flowcontrol.apiserver.k8s.io": {"FlowSchema", "PriorityLevelConfiguration"},
	"networking.k8s.io":            {"IPAddress", "IngressClass", "ServiceCIDR"},
	"node.k8s.io":                  {"RuntimeClass"},
	"rbac.authorization.k8s.io":    {"ClusterRole", "ClusterRoleBinding"},
	"resource.k8s.io":              {"DeviceClass", "ResourceSlice"},
	"scheduling.k8s.io":            {"PriorityClass"},
	"storage.k8s.io":               {"CSIDriver", "CSINode", "StorageClass", "VolumeAttachment", "VolumeAttributesClass"},
}

// checkKyvernoValues refuses the values qnctl cannot give a policy: only
// request.operation, request.object.* and request.oldObject.* (global or
// per resource) are taken, as Kyverno's CLI sets them before judging.
func checkKyvernoValues(doc *kyvernoTestDoc, v *kyvernoValuesSpec) error {
	if v == nil {
		return nil
	}
	where := doc.Path + ": values"
	if doc.Spec.Variables != "" {
		where = doc.Spec.Variables
	}
	check := func(field string, vals map[string]any) error {
		for _, k := range sortedKeys(vals) {
			if k == "request.operation" {
				switch vals[k] {
				case "CREATE", "UPDATE", "DELETE", "CONNECT":
					continue
				}
				return fmt.Errorf("%s: %s: request.operation %v is not one of CREATE, UPDATE, DELETE, CONNECT", where, field, vals[k])
			}
			if strings.HasPrefix(k, "request.object.") || strings.HasPrefix(k, "request.oldObject.") {
				continue
			}
			return fmt.Errorf("%s: %s: %q: not supported: qnctl gives a policy the values of request.operation, request.object.* and request.oldObject.* only (other variables come from the policy's own context entries)", where, field, k)
		}
		return nil
	}
	if err := check("globalValues", v.GlobalValues); err != nil {
		return err
	}
	for _, p := range v.Policies {
		for _, r := range p.Resources {
			if err := check(fmt.Sprintf("policies[%s].resources[%s].values", p.Name, r.Name), r.Values); err != nil {
				return err
			}
		}
		for _, r := range p.Rules {
			if len(r.Values) > 0 || len(r.ForeachValues) > 0 {
				return fmt.Errorf("%s: policies[%s].rules[%s]: not supported: rule values stand in for apiCall and configMap context entries, which qnctl does not load", where, p.Name, r.Name)
			}
		}
	}
	switch {
	case len(v.NamespaceSelectors) > 0 || len(v.Namespaces) > 0:
		return fmt.Errorf("%s: namespaceSelector: not supported: qnctl does not judge match.namespaceSelector", where)
	case len(v.Subresources) > 0:
		return fmt.Errorf("%s: subresources: not supported", where)
	}
	return nil
}

// resourceValues are the values of one (policy, resource): the global
// ones, then the resource's own, as Kyverno's CLI merges them.
func (j *kyvernoJudged) resourceValues(policy, resource string) map[string]any {
	out := map[string]any{}
	if j.values == nil {
		return out
	}
	for k, v := range j.values.GlobalValues {
		out[k] = v
	}
	for _, p := range j.values.Policies {
		if p.Name != policy {
			continue
		}
		for _, r := range p.Resources {
			if r.Name == resource {
				for k, v := range r.Values {
					out[k] = v
				}
			}
		}
	}
	return out
}

// judge is the verdict of policy pi on resource ri under operation op
// ("" is the values' request.operation, else CREATE).
func (j *kyvernoJudged) judge(ctx context.Context, op string, ri, pi int) []kyverno.RuleResult {
	key := verdictKey{op: op, resource: ri, policy: pi}
	if res, ok := j.verdicts[key]; ok {
		return res
	}
	res := j.policies[pi].Results(ctx, j.request(op, j.resources[ri], j.policies[pi].Name()))
	j.verdicts[key] = res
	return res
}

// request is resource r as a request of operation op ("" is the values'
// request.operation, else CREATE) to the named policy, changed by the
// values the policy is given for it.
func (j *kyvernoJudged) request(op string, r *kyvernoResource, policy string) *dialect.Request {
	vals := j.resourceValues(policy, r.Name)
	if op == "" {
		op, _ = vals["request.operation"].(string)
	}
	if op == "" {
		op = "CREATE"
	}
	// The object and the old object are the resource, each changed by the
	// values of its own path.
	obj := deepCopyJSON(r.Object).(map[string]any)
	old := deepCopyJSON(r.Object).(map[string]any)
	for _, k := range sortedKeys(vals) {
		if path, ok := strings.CutPrefix(k, "request.object."); ok {
			setValuePath(obj, path, vals[k])
		}
		if path, ok := strings.CutPrefix(k, "request.oldObject."); ok {
			setValuePath(old, path, vals[k])
		}
	}
	gv, _ := schema.ParseGroupVersion(r.APIVersion)
	req := &dialect.Request{
		Operation: op,
		Kind:      metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: r.Kind},
		Resource:  metav1.GroupVersionResource{Group: gv.Group, Version: gv.Version, Resource: resourceFor(gv.Group, r.Kind)},
		Namespace: r.Namespace,
		Name:      r.Name,
	}
	switch op {
	case "UPDATE":
		req.Object, req.OldObject = obj, old
	case "DELETE":
		req.OldObject = old
	default:
		req.Object = obj
	}
	if u := j.user; u != nil {
		req.UserInfo.Username, req.UserInfo.UID, req.UserInfo.Groups = u.UserInfo.Username, u.UserInfo.UID, u.UserInfo.Groups
		for k, v := range u.UserInfo.Extra {
			if req.UserInfo.Extra == nil {
				req.UserInfo.Extra = map[string]authenticationv1.ExtraValue{}
			}
			req.UserInfo.Extra[k] = authenticationv1.ExtraValue(v)
		}
		req.DryRun = u.DryRun
	}
	return req
}

// setValuePath sets a dotted path (Kyverno's: fields split on ".", quoted
// with "..." when they hold one) in obj, merging maps into maps.
func setValuePath(obj map[string]any, path string, v any) {
	r := csv.NewReader(strings.NewReader(path))
	r.Comma = '.'
	fields, err := r.Read()
	if err != nil || len(fields) == 0 {
		return
	}
	m := obj
	for _, f := range fields[:len(fields)-1] {
		next, ok := m[f].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[f] = next
		}
		m = next
	}
	last := fields[len(fields)-1]
	if old, ok := m[last].(map[string]any); ok {
		if nv, ok := v.(map[string]any); ok {
			for k, x := range nv {
				old[k] = x
			}
			return
		}
	}
	m[last] = v
}

// deepCopyJSON copies a decoded JSON value.
func deepCopyJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopyJSON(x)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, x := range t {
			l[i] = deepCopyJSON(x)
		}
		return l
	}
	return v
}

// rows compares every row of the test with the verdicts, one result per
// (row, resource, rule verdict), as Kyverno's CLI lists them.
func (j *kyvernoJudged) rows(ctx context.Context, filter *regexp.Regexp) []testResult {
	var out []testResult
	for i := range j.doc.Spec.Results {
		for _, tr := range j.row(ctx, i) {
			if filter != nil && !filter.MatchString(tr.Name) && !filter.MatchString(j.doc.Name()) {
				continue
			}
			out = append(out, tr)
		}
	}
	return out
}

func (j *kyvernoJudged) row(ctx context.Context, i int) []testResult {
	r := j.doc.Spec.Results[i]
	loc := fmt.Sprintf("%s:%d", j.doc.Path, j.doc.RowLines[i])
	base := testResult{Kind: "kyverno", Suite: j.doc.Path, Location: loc}
	fail := func(name, msg string) []testResult {
		tr := base
		tr.Name, tr.Failures = name, []string{msg}
		return []testResult{tr}
	}
	rowName := r.Policy
	if r.Rule != "" {
		rowName += "/" + r.Rule
	}
	pols := j.rowPolicies(r.Policy)
	if cel := j.rowCELPolicies(r.Policy); len(cel) > 0 && len(pols) == 0 {
		return j.celRow(ctx, i, base, cel)
	}
	if len(pols) == 0 {
		return fail(rowName, fmt.Sprintf("policy %q is not among the test's policies (%s)", r.Policy, j.policyNames()))
	}
	if r.Rule != "" && !slices.ContainsFunc(pols, func(pi int) bool { return hasRule(j.policies[pi], r.Rule) }) {
		return fail(rowName, fmt.Sprintf("policy %s has no rule %q (rules: %s)", r.Policy, r.Rule, ruleNames(j.policies[pols[0]])))
	}
	res, missing := j.rowResources(r)
	if len(missing) > 0 {
		return fail(rowName, fmt.Sprintf("resource %s is not among the test's resources (%s)", strings.Join(missing, ", "), j.resourceNames()))
	}
	var out []testResult
	for _, ri := range res {
		for _, pi := range pols {
			start := time.Now()
			var checked []kyverno.RuleResult
			for _, rr := range j.judge(ctx, r.Operation, ri, pi) {
				if r.Rule == "" || rr.Rule == r.Rule || rr.Rule == "autogen-"+r.Rule || rr.Rule == "autogen-cronjob-"+r.Rule {
					checked = append(checked, rr)
				}
			}
			label := j.resources[ri].label()
			if len(checked) == 0 {
				tr := base
				tr.Name = rowName + " " + label
				tr.Passed = true
				tr.Answer = fmt.Sprintf("excluded: no rule of %s applies to %s; Kyverno's CLI passes the row whatever it expects (%s)", policyLabel(j.policies[pi]), label, r.Result)
				tr.Duration = time.Since(start)
				out = append(out, tr)
				continue
			}
			for _, rr := range checked {
				tr := base
				tr.Name = policyLabel(j.policies[pi]) + "/" + rr.Rule + " " + label
				status := string(rr.Status)
				if rr.Status == kyverno.StatusFail && j.unscored[j.policies[pi]] {
					status = "warn"
				}
				tr.Answer = status
				if rr.Message != "" {
					tr.Answer += ": " + rr.Message
				}
				if status != r.Result {
					msg := fmt.Sprintf("want %s, got %s", r.Result, status)
					if rr.Message != "" {
						msg += ": " + rr.Message
					}
					tr.Failures = []string{msg}
				}
				tr.Passed = len(tr.Failures) == 0
				tr.Duration = time.Since(start)
				out = append(out, tr)
			}
		}
	}
	return out
}

// rowPolicies are the policies a row names: by name, and by namespace too
// when it is written namespace/name.
func (j *kyvernoJudged) rowPolicies(name string) []int {
	ns, n, namespaced := strings.Cut(name, "/")
	if !namespaced {
		n = ns
	}
	var out []int
	for i, p := range j.policies {
		if p.Name() == n && (!namespaced || p.Namespace() == ns) {
			out = append(out, i)
		}
	}
	return out
}

// rowResources are the resources a row names (all when it names none),
// and the names that match none.
func (j *kyvernoJudged) rowResources(r kyvernoRow) ([]int, []string) {
	if len(r.Resources) == 0 && len(r.ResourceSpecs) == 0 {
		out := make([]int, len(j.resources))
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	var missing []string
	add := func(i int) {
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	for _, name := range r.Resources {
		ns, n, namespaced := strings.Cut(name, "/")
		found := false
		for i, res := range j.resources {
			if namespaced && res.Namespace == ns && res.Name == n || !namespaced && res.Name == name {
				add(i)
				found = true
			}
		}
		if !found {
			missing = append(missing, name)
		}
	}
	for _, s := range r.ResourceSpecs {
		apiVersion := s.Version
		if s.Group != "" {
			apiVersion = s.Group + "/" + s.Version
		}
		found := false
		for i, res := range j.resources {
			if res.APIVersion == apiVersion && res.Namespace == s.Namespace && res.Name == s.Name && (s.Kind == "" || res.Kind == s.Kind) {
				add(i)
				found = true
			}
		}
		if !found {
			missing = append(missing, strings.Trim(apiVersion+"/"+s.Kind+"/"+s.Namespace+"/"+s.Name, "/"))
		}
	}
	return out, missing
}

func hasRule(p *kyverno.Policy, name string) bool {
	for _, r := range p.Rules() {
		if r.Name == name || r.Name == "autogen-"+name || r.Name == "autogen-cronjob-"+name {
			return true
		}
	}
	return false
}

func ruleNames(p *kyverno.Policy) string {
	var names []string
	for _, r := range p.Rules() {
		names = append(names, r.Name)
	}
	return strings.Join(names, ", ")
}

// policyLabel is a policy as a row names it: namespace/name for a Policy.
func policyLabel(p namedPolicy) string {
	if p.Namespace() != "" {
		return p.Namespace() + "/" + p.Name()
	}
	return p.Name()
}

func (j *kyvernoJudged) policyNames() string {
	names := make([]string, 0, len(j.policies)+len(j.cel))
	for _, p := range j.policies {
		names = append(names, policyLabel(p))
	}
	for _, p := range j.cel {
		names = append(names, policyLabel(p))
	}
	return strings.Join(names, ", ")
}

func (j *kyvernoJudged) resourceNames() string {
	if len(j.resources) == 0 {
		return "none"
	}
	names := make([]string, len(j.resources))
	for i, r := range j.resources {
		names[i] = r.label()
	}
	return strings.Join(names, ", ")
}

// kyvernoTests is every Kyverno test under a folder, judged.
type kyvernoTests struct {
	// Files are the test files found.
	Files []string
	// Results are the rows' results; Errors the tests that do not load.
	Results []testResult
	Errors  []string
}

// runKyvernoTests finds and runs the Kyverno tests under dir.
func runKyvernoTests(ctx context.Context, dir, fileName string, filter *regexp.Regexp) (*kyvernoTests, error) {
	files, err := findKyvernoTests(dir, fileName)
	if err != nil {
		return nil, err
	}
	out := &kyvernoTests{Files: files}
	for _, f := range files {
		docs, err := readKyvernoTests(f)
		if err != nil {
			out.Errors = append(out.Errors, err.Error())
			continue
		}
		for _, d := range docs {
			j, err := loadKyvernoTest(d)
			if err != nil {
				out.Errors = append(out.Errors, err.Error())
				continue
			}
			out.Results = append(out.Results, j.rows(ctx, filter)...)
		}
	}
	return out, nil
}

// hasKyvernoTests says dir holds a Kyverno test file somewhere below it.
func hasKyvernoTests(dir, fileName string) bool {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return false
	}
	files, err := findKyvernoTests(dir, fileName)
	return err == nil && len(files) > 0
}

// isPolicyDirectory says dir has a role table: it is a policy directory
// whose Rego tests and fixtures run beside its Kyverno tests.
func isPolicyDirectory(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, policies.RolesFile))
	return err == nil
}
