package vap

import (
	"fmt"

	"github.com/quantumnode/qn-admission/policies"
)

// Where says what enforces a rule.
type Where string

const (
	// WhereAPIServer: the compiled ValidatingAdmissionPolicy, beside the
	// webhook, so the rule holds while the webhook is not called.
	WhereAPIServer Where = "ValidatingAdmissionPolicy"
	// WhereCRD: the QuantumNode CRD's own schema and rules.
	WhereCRD Where = "QuantumNode CRD"
	// WhereWebhook: the webhook alone; the rule does not hold while the
	// webhook is not called.
	WhereWebhook Where = "webhook"
)

// Report says, role by role, where each rule of the role table is
// enforced, and why a rule was left to the webhook.
type Report struct {
	// Name of the compiled objects; Source and Revision of the set.
	Name, Source, Revision string
	// Table are the rules of the whole table (exemptions, the control
	// plane's deletions).
	Table []Rule
	Roles []RoleReport
}

// RoleReport is one role's rules.
type RoleReport struct {
	Role        string
	Enforcement policies.Enforcement
	// Note, when set, qualifies every rule of the role (a role in warn
	// mode is never refused by the API server).
	Note  string
	Rules []Rule
}

// Rule is one rule of a role.
type Rule struct {
	// Field is where roles.yaml declares it ("roles.realtime.window").
	Field string
	// What the rule checks.
	What  string
	Where Where
	// Why it is not in the API server's policy; empty when it is.
	Why string
}

func (r *RoleReport) add(field, what string, where Where, why string) {
	r.Rules = append(r.Rules, Rule{Field: field, What: what, Where: where, Why: why})
}

// LeftOut lists the rules the API server does not enforce.
func (r RoleReport) LeftOut() []Rule {
	var out []Rule
	for _, rule := range r.Rules {
		if rule.Where == WhereWebhook {
			out = append(out, rule)
		}
	}
	return out
}

// headings of the report's sections, by where the rules are enforced.
var headings = []struct {
	where Where
	text  string
}{
	{WhereAPIServer, "in the API server, by this policy:"},
	{WhereCRD, "in the API server, by the QuantumNode CRD:"},
	{WhereWebhook, "left out (the webhook alone enforces them):"},
}

// Text is the report as the comment lines that open `qnctl vap`'s output
// (without the leading "# ").
func (r Report) Text() []string {
	lines := []string{
		fmt.Sprintf("qn-admission's role table from %s (revision %s), compiled for the API server:", r.Source, r.Revision),
		"the ValidatingAdmissionPolicy, its binding and its parameters (QuantumNodeRoleTable " + r.Name + ").",
		"The rules listed under \"in the API server\" hold beside the webhook and while it is not called.",
	}
	lines = append(lines, "", "every role")
	for _, rule := range r.Table {
		lines = append(lines, "  "+rule.What)
	}
	for _, role := range r.Roles {
		lines = append(lines, "", fmt.Sprintf("role %s (enforcement %s)", role.Role, role.Enforcement))
		if role.Note != "" {
			lines = append(lines, "  "+role.Note)
		}
		for _, h := range headings {
			var rules []string
			for _, rule := range role.Rules {
				if rule.Where != h.where {
					continue
				}
				line := "    " + rule.What
				if rule.Why != "" && h.where == WhereWebhook {
					line += ": " + rule.Why
				}
				rules = append(rules, line)
			}
			if len(rules) > 0 {
				lines = append(append(lines, "  "+h.text), rules...)
			}
		}
	}
	return lines
}
