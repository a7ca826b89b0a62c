// Package vap compiles the static part of a policy set's role table into a
// ValidatingAdmissionPolicy, its binding and its parameters (a
// QuantumNodeRoleTable), so the API server enforces it itself, beside the
// webhook: the operations each role allows, the stored role judging UPDATE
// and DELETE, moves, requesters, deleters, the exemptions, the control
// plane's deletions, and the bundled role conditions that are plain
// comparisons. What CEL cannot do (rate windows, Rego, mutation) stays with
// the webhook, and the Report says so, role by role.
//
// Compile is a pure function of the loaded set. The policy's CEL is the
// same for every role table: only the parameters change with roles.yaml.
package vap

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
)

// DefaultName names the policy, its binding and its parameters.
const DefaultName = "qn-admission"

// Options say how the compiled objects are deployed. Only the binding and
// the names depend on them; the rules depend on the set alone.
type Options struct {
	// Name of the three objects; DefaultName when empty.
	Name string
	// Actions of the binding: [Deny] enforces beside the webhook (the
	// default); [Audit, Warn] reports what it would refuse.
	Actions []admissionregistrationv1.ValidationAction
	// ExcludeNamespaces are never judged, as the webhook configurations'
	// namespaceSelector excludes them; [kube-system] when nil.
	ExcludeNamespaces []string
	// FailurePolicy applies when the policy cannot be evaluated (its
	// parameters' kind is not served, say after an upgrade that did not
	// apply the new CRD); Ignore when empty: the policy is a safety net
	// beside the webhook, and refusing then would refuse every QuantumNode
	// write, the namespace controller's deletions among them. No request
	// can make its expressions fail (policies/vap's tests).
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// Source names the policy directory in the parameters ("bundled" or a
	// path).
	Source string
}

// Result is what Compile returns: the three objects and what they leave to
// the webhook.
type Result struct {
	Policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	Binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	Params  *qnv1alpha1.QuantumNodeRoleTable
	Report  Report
}

// Limits of the parameters' schema (config/crd/qn.dev_quantumnoderoletables.yaml),
// which bound what the policy's CEL may cost.
const (
	maxRoles      = 64
	maxNames      = 64
	maxConditions = 16
	maxInValues   = 64
)

// Compile compiles set's role table. The error names the roles.yaml field
// that exceeds what the parameters' schema admits.
func Compile(set *policies.Set, opts Options) (*Result, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Actions == nil {
		opts.Actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	if opts.ExcludeNamespaces == nil {
		opts.ExcludeNamespaces = []string{"kube-system"}
	}
	if opts.FailurePolicy == "" {
		opts.FailurePolicy = admissionregistrationv1.Ignore
	}
	t := set.Roles
	c := &compiler{set: set, limits: &limitCheck{}}
	spec := qnv1alpha1.RoleTableSpec{
		Revision:    set.Revision,
		Source:      opts.Source,
		DefaultRole: t.DefaultRole,
		RoleNames:   t.Names(),
		Exemptions:  c.exemptions(t.Exemptions),
		Roles:       map[string]qnv1alpha1.CompiledRole{},
	}
	c.limits.count("roles", len(t.Roles), maxRoles)
	report := Report{Source: opts.Source, Revision: set.Revision, Name: opts.Name, Table: tableRules(t.Exemptions, opts.ExcludeNamespaces)}
	for _, name := range t.Names() {
		role, rr := c.role(name, t.Roles[name])
		spec.Roles[name] = role
		report.Roles = append(report.Roles, rr)
	}
	if err := c.limits.err(); err != nil {
		return nil, err
	}
	return &Result{
		Policy:  newPolicy(opts.Name, opts.FailurePolicy),
		Binding: newBinding(opts),
		Params: &qnv1alpha1.QuantumNodeRoleTable{
			TypeMeta:   metav1.TypeMeta{APIVersion: qnv1alpha1.GroupVersion.String(), Kind: qnv1alpha1.RoleTableKind},
			ObjectMeta: metav1.ObjectMeta{Name: opts.Name},
			Spec:       spec,
		},
		Report: report,
	}, nil
}

// tableRules are the report's rules of the whole table.
func tableRules(x policies.Exemptions, excluded []string) []Rule {
	parts := []string{(&policies.Subjects{Users: x.Users, Groups: x.Groups}).String()}
	if len(x.Namespaces) > 0 {
		parts = append(parts, "namespaces "+strings.Join(x.Namespaces, ", "))
	}
	exempt := strings.Trim(strings.Join(parts, "; "), "; ")
	if exempt == "" {
		exempt = "none"
	}
	return []Rule{
		{Field: "exemptions", What: "exemptions (admitted unjudged): " + exempt, Where: WhereAPIServer},
		{What: "DELETE by the control plane (" + strings.Join(policies.ControlPlaneDeleters(), ", ") + "): always admitted", Where: WhereAPIServer},
		{What: "namespaces the binding never judges, as the webhook configurations exclude them: " + strings.Join(excluded, ", "), Where: WhereAPIServer},
	}
}

// newBinding binds the policy to its parameters with the deployment's
// actions and namespaces.
func newBinding(opts Options) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	// Missing parameters skip the policy rather than refuse every write,
	// the namespace controller's deletions among them: deleting the
	// parameters is an administrator's act, like deleting the policy.
	allow := admissionregistrationv1.AllowAction
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: opts.Name,
			ParamRef:   &admissionregistrationv1.ParamRef{Name: opts.Name, ParameterNotFoundAction: &allow},
			MatchResources: &admissionregistrationv1.MatchResources{
				// kubernetes.io/metadata.name is set by the API server from
				// the name: no namespace editor can forge it.
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: slices.Clone(opts.ExcludeNamespaces),
				}}},
			},
			ValidationActions: slices.Clone(opts.Actions),
		},
	}
}

// compiler holds what one compilation reads and the limits it found
// exceeded.
type compiler struct {
	set    *policies.Set
	limits *limitCheck
	// modules are the set's parsed modules by package, once asked for.
	modules map[string][]*ast.Module
}

func (c *compiler) exemptions(x policies.Exemptions) qnv1alpha1.RoleTableExemptions {
	users, userPrefixes := split(x.Users)
	groups, groupPrefixes := split(x.Groups)
	namespaces, namespacePrefixes := split(x.Namespaces)
	for _, l := range []struct {
		field string
		n     int
	}{{"exemptions.users", len(x.Users)}, {"exemptions.groups", len(x.Groups)}, {"exemptions.namespaces", len(x.Namespaces)}} {
		c.limits.count(l.field, l.n, maxNames)
	}
	return qnv1alpha1.RoleTableExemptions{
		Users: users, UserPrefixes: userPrefixes, Groups: groups, GroupPrefixes: groupPrefixes,
		Namespaces: namespaces, NamespacePrefixes: namespacePrefixes,
	}
}

// role compiles one role and reports where each of its rules is enforced.
func (c *compiler) role(name string, r policies.Role) (qnv1alpha1.CompiledRole, RoleReport) {
	p := "roles." + name
	rr := RoleReport{Role: name, Enforcement: r.Enforcement}
	out := qnv1alpha1.CompiledRole{
		Operations: slices.Clone(r.Operations),
		Enforced:   r.Enforcement == policies.EnforceDeny,
		Requesters: c.subjects(p+".requesters", r.Requesters),
		Delete:     c.subjects(p+".delete", r.Delete),
		MoveTo:     append([]string{}, r.MoveTo...),
		Conditions: qnv1alpha1.RoleConditions{Labels: []qnv1alpha1.ValueCondition{}, Annotations: []qnv1alpha1.ValueCondition{}},
	}
	c.limits.count(p+".moveTo", len(r.MoveTo), maxNames)
	rr.add(p+".operations", "operations "+strings.Join(r.Operations, ", "), WhereAPIServer, "")
	if r.Requesters != nil {
		rr.add(p+".requesters", "requesters: "+r.Requesters.String(), WhereAPIServer, "")
	}
	if r.Delete != nil {
		rr.add(p+".delete", "delete: "+r.Delete.String(), WhereAPIServer, "")
	}
	moveTo := "moveTo: none"
	if len(r.MoveTo) > 0 {
		moveTo = "moveTo: " + strings.Join(r.MoveTo, ", ")
	}
	rr.add(p+".moveTo", moveTo, WhereAPIServer, "")
	if w := r.Window; w != nil {
		rr.add(p+".window", fmt.Sprintf("window: %d changes per %s per %s", w.Limit, w.Period, w.Key), WhereWebhook,
			"a rate window counts the requester's recent changes; the API server's CEL sees one request and keeps no state")
	}
	for _, pkg := range r.Packages {
		c.pkg(p, pkg, &r, &out.Conditions, &rr)
	}
	for _, pat := range r.Patterns {
		rr.add(p+".patterns", "pattern policy "+pat, WhereWebhook, "Kyverno-style patterns are matched by the webhook only")
	}
	for _, pol := range r.Policies {
		rr.add(p+".policies", "policy "+pol, WhereWebhook, "Kyverno and Kubernetes policy files listed by a role are judged by the webhook only; load a ValidatingAdmissionPolicy into the API server yourself to have it enforce one there")
	}
	c.limits.count(p+" conditions on labels", len(out.Conditions.Labels), maxConditions)
	c.limits.count(p+" conditions on annotations", len(out.Conditions.Annotations), maxConditions)
	if !out.Enforced {
		rr.Note = fmt.Sprintf("enforcement %s: the API server leaves this role's table refusals to the webhook, which %s them (a package enforced by packageEnforcement is still enforced)", r.Enforcement, map[policies.Enforcement]string{policies.EnforceWarn: "warns of", policies.EnforceDryRun: "logs"}[r.Enforcement])
	}
	return out, rr
}

// pkg sorts one Rego package of a role: compiled into conditions (a
// bundled package the compiler knows, unchanged), enforced by the CRD, or
// left to the webhook.
func (c *compiler) pkg(path, pkg string, role *policies.Role, conds *qnv1alpha1.RoleConditions, rr *RoleReport) {
	if c.set.Compiled.PackageReadsInventory(pkg) {
		rr.add(path+".packages", "Rego package "+pkg, WhereWebhook,
			"it reads the cluster inventory (data.inventory, other stored objects), which the ValidatingAdmissionPolicy cannot see: its CEL sees only the request")
		return
	}
	tr, known := translations[pkg]
	if !known {
		rr.add(path+".packages", "Rego package "+pkg, WhereWebhook, "Rego runs in the webhook; the API server evaluates CEL only")
		return
	}
	if changed := c.changedFromBundled(append([]string{pkg}, tr.needs...)); changed != "" {
		rr.add(path+".packages", "Rego package "+pkg, WhereWebhook,
			fmt.Sprintf("package %s differs from the bundled one, so its CEL translation may not say the same; only unchanged bundled packages compile", changed))
		return
	}
	if tr.where != WhereAPIServer {
		rr.add(path+".packages", "Rego package "+pkg+": "+tr.what, tr.where, tr.why)
		return
	}
	if e := role.EnforcementOf(pkg, false); e != policies.EnforceDeny {
		rr.add(path+".packages", "Rego package "+pkg+": "+tr.what, WhereWebhook,
			fmt.Sprintf("its enforcement is %s: the webhook %s its denials, the API server would refuse them", e, map[policies.Enforcement]string{policies.EnforceWarn: "warns of", policies.EnforceDryRun: "logs"}[e]))
		return
	}
	params, declared := c.set.Roles.Roles[tr.paramsRole]
	if !declared {
		rr.add(path+".packages", "Rego package "+pkg+": "+tr.what, WhereWebhook,
			fmt.Sprintf("it reads the parameters of role %s, which the role table does not declare", tr.paramsRole))
		return
	}
	compiled, err := tr.compile(params.Parameters)
	if err != nil {
		rr.add(path+".packages", "Rego package "+pkg+": "+tr.what, WhereWebhook, err.Error())
		return
	}
	conds.Labels = append(conds.Labels, compiled.Labels...)
	conds.Annotations = append(conds.Annotations, compiled.Annotations...)
	rr.add(path+".packages", "Rego package "+pkg+": "+tr.what, WhereAPIServer, "")
}

// subjects compiles a requesters or delete list: service accounts become
// user names, and entries ending in * become prefixes.
func (c *compiler) subjects(path string, s *policies.Subjects) *qnv1alpha1.CompiledSubjects {
	if s == nil {
		return nil
	}
	all := slices.Clone(s.Users)
	for _, sa := range s.ServiceAccounts {
		all = append(all, "system:serviceaccount:"+sa)
	}
	c.limits.count(path+".users and serviceAccounts", len(all), maxNames)
	c.limits.count(path+".groups", len(s.Groups), maxNames)
	users, userPrefixes := split(all)
	groups, groupPrefixes := split(s.Groups)
	return &qnv1alpha1.CompiledSubjects{Users: users, UserPrefixes: userPrefixes, Groups: groups, GroupPrefixes: groupPrefixes, Description: s.String()}
}

// split separates exact names from prefixes (an entry ending in *), each
// sorted and never nil.
func split(names []string) (exact, prefixes []string) {
	exact, prefixes = []string{}, []string{}
	for _, n := range names {
		if p, ok := strings.CutSuffix(n, "*"); ok {
			prefixes = append(prefixes, p)
		} else {
			exact = append(exact, n)
		}
	}
	slices.Sort(exact)
	slices.Sort(prefixes)
	return slices.Compact(exact), slices.Compact(prefixes)
}

// limitCheck collects the role table's fields that exceed the parameters'
// schema.
type limitCheck struct{ over []string }

func (l *limitCheck) count(field string, n, limit int) {
	if n > limit {
		l.over = append(l.over, fmt.Sprintf("%s: %d entries, at most %d compile", field, n, limit))
	}
}

func (l *limitCheck) err() error {
	if len(l.over) == 0 {
		return nil
	}
	return fmt.Errorf("the role table does not fit a QuantumNodeRoleTable (its limits bound what the policy's CEL may cost): %s", strings.Join(l.over, "; "))
}

// number formats a role parameter that must be a number, as a decimal the
// parameters' schema admits (at most 15 significant digits, which doubles
// order exactly).
func number(field string, v any) (string, error) {
	var s string
	switch n := v.(type) {
	case int:
		s = strconv.Itoa(n)
	case int64:
		s = strconv.FormatInt(n, 10)
	case uint64:
		s = strconv.FormatUint(n, 10)
	case float64:
		s = strconv.FormatFloat(n, 'f', -1, 64)
	default:
		return "", fmt.Errorf("%s is %s, not a number", field, describe(v))
	}
	if digits := strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(s), "0"); len(digits) > 15 {
		return "", fmt.Errorf("%s is %s: more than 15 significant digits do not compare exactly as a double", field, s)
	}
	return s, nil
}

// decimals counts the digits after the point of a decimal.
func decimals(s string) int32 {
	if _, frac, ok := strings.Cut(s, "."); ok {
		return int32(len(frac))
	}
	return 0
}

// stringList is a role parameter that must be a non-empty list of short
// strings (label values).
func stringList(field string, v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("%s is %s, not a non-empty list of strings", field, describe(v))
	}
	if len(list) > maxInValues {
		return nil, fmt.Errorf("%s has %d entries, at most %d compile", field, len(list), maxInValues)
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok || len(s) > 63 {
			return nil, fmt.Errorf("%s[%d] is %s, not a label value (a string of at most 63 characters)", field, i, describe(e))
		}
		out = append(out, s)
	}
	return out, nil
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "absent"
	case string:
		return strconv.Quote(x)
	case []any:
		return fmt.Sprintf("a list of %d", len(x))
	case map[string]any:
		return "a mapping with keys " + strings.Join(slices.Sorted(maps.Keys(x)), ", ")
	default:
		return fmt.Sprintf("%v", x)
	}
}
