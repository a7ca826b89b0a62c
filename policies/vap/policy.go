package vap

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
)

// The policy's CEL is constant: it reads the role table from its
// parameters (a QuantumNodeRoleTable), so a change of roles.yaml changes
// the parameters and never the expressions. It mirrors policies/binding.go
// step by step and says what the webhook says, so a refusal reads the same
// whichever of the two made it.
//
// Only the API server's CEL of Kubernetes 1.29 is used (the chart supports
// 1.30, whose API server compiles new expressions in that environment), and
// every expression is written so that no request can make it fail: a
// failure would answer by the policy's failurePolicy instead of the rules.

// variable is one entry of spec.variables, evaluated lazily and at most once
// per request.
type variable struct{ name, expression string }

// variables are the policy's named steps, in the order binding.go takes
// them.
var variables = []variable{
	{"table", `params.spec`},
	{"user", `request.userInfo.username`},
	{"groups", `has(request.userInfo.groups) ? request.userInfo.groups : []`},
	// requester names who asks, as the webhook's messages do.
	// A message is at most 5 KiB, or the API server drops it: a requester
	// in more than 20 groups is named with their number.
	{"requester", `'user ' + strings.quote(variables.user) + (variables.groups.size() == 0 ? '' : variables.groups.size() <= 20 ? ' (groups ' + variables.groups.join(', ') + ')' : ' (in ' + string(variables.groups.size()) + ' groups)')`},
	// The role the new object names, or the default; the role the stored
	// object names (UPDATE, DELETE), or the default. An empty annotation
	// names the default, as in the webhook.
	{"newRole", `string(` + roleOf("object") + `)`},
	{"storedRole", `string(` + roleOf("oldObject") + `)`},
	{"newKnown", `variables.newRole in variables.table.roles`},
	{"storedKnown", `variables.storedRole in variables.table.roles`},
	// newSpec and storedSpec are read only where newKnown or storedKnown
	// holds (variables are evaluated lazily).
	{"newSpec", `variables.table.roles[variables.newRole]`},
	{"storedSpec", `variables.table.roles[variables.storedRole]`},
	{"newRequesterAdmitted", `!has(variables.newSpec.requesters) || ` + subjectsMatch("variables.newSpec.requesters")},
	// A refusal is [] or [role, message, "always" | "role"]: "role" when the
	// role's enforcement decides (a role in warn or dryrun mode only warns,
	// in the webhook), "always" for an unknown role.
	{"entryRefusal", `!variables.newKnown ? ` +
		`[variables.newRole, string('annotation ` + policies.RoleAnnotation + `=' + strings.quote(variables.newRole.size() > 64 ? variables.newRole.substring(0, 64) + '…' : variables.newRole) + ' names no known role; known roles: ' + variables.table.roleNames.join(', ')), 'always'] : ` +
		`!(request.operation in variables.newSpec.operations) ? ` +
		`[variables.newRole, string('role ' + strings.quote(variables.newRole) + ' may not ' + request.operation.lowerAscii() + ' ` + qnv1alpha1.Kind + `; it may ' + variables.newSpec.operations.join(', ')), 'role'] : ` +
		`!variables.newRequesterAdmitted ? ` +
		`[variables.newRole, string(variables.requester + ' may not ' + (request.operation == 'UPDATE' ? 'move' : 'create') + ' ` + qnv1alpha1.Kind + `s under role ' + strings.quote(variables.newRole) + ': roles.' + variables.newRole + '.requesters admits only ' + variables.newSpec.requesters.description), 'role'] : ` +
		`[]`},
	{"updateRefusal", `!variables.storedKnown ? variables.entryRefusal : ` +
		`!('UPDATE' in variables.storedSpec.operations) ? ` +
		`[variables.storedRole, string('the stored ` + qnv1alpha1.Kind + ` is under role ' + strings.quote(variables.storedRole) + ', which may not update it (it may ' + variables.storedSpec.operations.join(', ') + '); removing or changing the ` + policies.RoleAnnotation + ` annotation does not change the role that judges an update'), 'role'] : ` +
		`variables.newRole == variables.storedRole ? [] : ` +
		`!(variables.newRole in variables.storedSpec.moveTo) ? ` +
		`[variables.storedRole, string('the stored ` + qnv1alpha1.Kind + ` is under role ' + strings.quote(variables.storedRole) + ', which does not let it move to role ' + strings.quote(variables.newRole) + ' (roles.' + variables.storedRole + '.moveTo ' + (variables.storedSpec.moveTo.size() > 0 ? 'allows only ' + variables.storedSpec.moveTo.join(', ') : 'lists none') + '); delete and recreate it under the new role, or ask an administrator'), 'role'] : ` +
		`variables.entryRefusal`},
	// A stored role the table no longer declares is deleted under the
	// default role, so its nodes never become undeletable.
	{"deleteRole", `variables.storedKnown ? variables.storedRole : string(variables.table.defaultRole)`},
	{"deleteSpec", `variables.table.roles[variables.deleteRole]`},
	{"deleteRefusal", `'DELETE' in variables.deleteSpec.operations || has(variables.deleteSpec.delete) && ` + subjectsMatch("variables.deleteSpec.delete") + ` ? [] : ` +
		`[variables.deleteRole, string(variables.requester + ' may not delete a ` + qnv1alpha1.Kind + ` of role ' + strings.quote(variables.deleteRole) + ': roles.' + variables.deleteRole + '.delete admits ' + (has(variables.deleteSpec.delete) ? variables.deleteSpec.delete.description : 'nobody but the control plane')), 'role']`},
	{"refusal", `request.operation == 'CREATE' ? variables.entryRefusal : request.operation == 'UPDATE' ? variables.updateRefusal : request.operation == 'DELETE' ? variables.deleteRefusal : []`},
	// refusalEnforced: the table's refusal is the answer (a role in warn
	// or dryrun mode only warns; an unknown role is refused in any mode).
	{"refusalEnforced", `variables.refusal.size() > 0 && (variables.refusal[2] == 'always' || variables.table.roles[variables.refusal[0]].enforced)`},
	// The role's conditions judge what a CREATE or UPDATE writes under the
	// role that judges it: the new one, or the one whose refusal only
	// warned (its policies then run, as in the webhook). A condition is in
	// the parameters only when its package is enforced.
	{"judgingRole", `variables.refusal.size() == 0 ? variables.newRole : variables.refusal[0]`},
	{"judgingSpec", `variables.table.roles[variables.judgingRole]`},
	{"labels", `object != null && has(object.metadata.labels) ? object.metadata.labels : {}`},
	{"annotations", `object != null && has(object.metadata.annotations) ? object.metadata.annotations : {}`},
	{"failedConditions", `(request.operation == 'CREATE' || request.operation == 'UPDATE') && !variables.refusalEnforced ? ` +
		conditionFailures("labels", "label") + ` + ` + conditionFailures("annotations", "annotation") + ` : []`},
}

// roleOf is the role an object's qn-role annotation names, or the default
// role; "" without the object.
func roleOf(obj string) string {
	a := obj + ".metadata.annotations"
	return obj + ` == null ? '' : has(` + a + `) && '` + policies.RoleAnnotation + `' in ` + a + ` && ` + a + `['` + policies.RoleAnnotation + `'] != '' ? ` +
		a + `['` + policies.RoleAnnotation + `'] : variables.table.defaultRole`
}

// subjectsMatch says whether the requester is one of the subjects s: the
// user name exactly or by prefix (service accounts are user names), or any
// of its groups.
func subjectsMatch(s string) string {
	return `(variables.user in ` + s + `.users || ` + s + `.userPrefixes.exists(p, variables.user.startsWith(p)) || ` +
		`variables.groups.exists(g, g in ` + s + `.groups || ` + s + `.groupPrefixes.exists(p, g.startsWith(p))))`
}

// conditionFailures lists a message for each of the role's conditions on
// labels or annotations (field) that the object fails.
//
// "A number below" is decided exactly, as the webhook's Rego decides it on
// arbitrary-precision numbers, without parsing what a double cannot hold:
// a value with 16 or more significant digits before the point is not below
// (Below has at most 15); any other value is cut after as many decimals as
// Below has, which keeps the answer (a value is below Below exactly when
// its truncation is), and then has at most 15 significant digits where it
// matters, which doubles compare exactly. Leading zeros change nothing.
func conditionFailures(field, what string) string {
	m := "variables." + field
	v := m + "[c.key]"
	point := v + ".indexOf('.')"
	truncated := point + ` < 0 ? ` + v + ` : ` + v + `.substring(0, c.belowDecimals == 0 ? ` + point + ` : ` +
		v + `.size() < ` + point + ` + 1 + c.belowDecimals ? ` + v + `.size() : ` + point + ` + 1 + c.belowDecimals)`
	below := v + `.matches(r'^[0-9]+(\.[0-9]+)?$') && !` + v + `.matches(r'^0*[1-9][0-9]{15}') && double(` + truncated + `) < double(c.below)`
	ok := `c.key in ` + m + ` && (has(c.values) ? ` + v + ` in c.values : ` + below + `)`
	// The value is shown clipped: a message is at most 5 KiB.
	found := `(c.key in ` + m + ` ? ' (found ' + strings.quote(` + v + `.size() > 64 ? ` + v + `.substring(0, 64) + '…' : ` + v + `) + ')' : ' (absent)')`
	want := `(has(c.values) ? (c.values.size() == 1 ? ' must be ' + strings.quote(c.values[0]) : ' must be one of ' + c.values.join(', ')) : ' must be a number below ' + c.below)`
	return `variables.judgingSpec.conditions.` + field + `.filter(c, !(` + ok + `)).map(c, '` + what + ` ' + c.key + ` + want + ` + ` + found + ` + ' [' + c.rule + ']')`
}

// controlPlaneDeleters as a CEL list literal.
func controlPlaneList() string {
	quoted := make([]string, 0, len(policies.ControlPlaneDeleters()))
	for _, u := range policies.ControlPlaneDeleters() {
		quoted = append(quoted, "'"+u+"'")
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// matchConditions leave alone what the webhook admits before any role:
// the exemptions of the role table and the control plane's deletions.
func matchConditions() []admissionregistrationv1.MatchCondition {
	x := "params.spec.exemptions"
	return []admissionregistrationv1.MatchCondition{{
		Name: "not-exempt",
		Expression: `!(request.userInfo.username in ` + x + `.users || ` + x + `.userPrefixes.exists(p, request.userInfo.username.startsWith(p)) || ` +
			`has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ` + x + `.groups || ` + x + `.groupPrefixes.exists(p, g.startsWith(p))) || ` +
			`request.namespace != '' && (request.namespace in ` + x + `.namespaces || ` + x + `.namespacePrefixes.exists(p, request.namespace.startsWith(p))))`,
	}, {
		// The namespace controller and the garbage collector always
		// delete, so a namespace always finishes deleting.
		Name:       "not-a-control-plane-deletion",
		Expression: `request.operation != 'DELETE' || !(request.userInfo.username in ` + controlPlaneList() + `)`,
	}}
}

// newPolicy is the ValidatingAdmissionPolicy, the same for every role
// table.
func newPolicy(name string, failurePolicy admissionregistrationv1.FailurePolicyType) *admissionregistrationv1.ValidatingAdmissionPolicy {
	forbidden := metav1.StatusReasonForbidden
	equivalent := admissionregistrationv1.Equivalent
	vars := make([]admissionregistrationv1.Variable, len(variables))
	for i, v := range variables {
		vars[i] = admissionregistrationv1.Variable{Name: v.name, Expression: v.expression}
	}
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: qnv1alpha1.GroupVersion.String(), Kind: qnv1alpha1.RoleTableKind},
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: &equivalent,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{qnv1alpha1.Group}, APIVersions: []string{qnv1alpha1.Version}, Resources: []string{qnv1alpha1.Resource},
						},
					},
				}},
			},
			FailurePolicy:   &failurePolicy,
			MatchConditions: matchConditions(),
			Variables:       vars,
			Validations: []admissionregistrationv1.Validation{{
				// The role table: operations, requesters, moves, deletions.
				Expression:        `!variables.refusalEnforced`,
				MessageExpression: `variables.refusal[1]`,
				Message:           "refused by qn-admission's role table",
				Reason:            &forbidden,
			}, {
				// The role's conditions that are plain comparisons.
				Expression:        `variables.failedConditions.size() == 0`,
				MessageExpression: `'denied by qn-admission (role ' + strings.quote(variables.judgingRole) + '): ' + variables.failedConditions.join('; ')`,
				Message:           "denied by qn-admission: the role's conditions do not hold (qnctl eval --explain says which)",
				Reason:            &forbidden,
			}},
		},
	}
}
