package admissionpolicy

import (
	"context"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/quantumnode/qn-admission/policies/dialect"
)

// Judgement is what a policy made of one request, validation by
// validation: what qnctl eval --explain prints, and what qnctl test
// reduces to the one result Kyverno's CLI reports for a CEL policy.
type Judgement struct {
	// Applies says the policy's match constraints (and its namespace and
	// evaluation settings) take the request in.
	Applies bool
	// Conditions says its match conditions held for at least one binding
	// (true for a policy without any); false also when they could not be
	// evaluated under failurePolicy Ignore.
	Conditions bool
	// Verdicts are the validations' verdicts for each binding and
	// parameter that takes the request, in declaration order, and the
	// errors that kept the policy or a binding from being judged (Rule
	// ""). Status is pass, fail or error.
	Verdicts []Verdict
}

// Verdict is one validation's verdict, with what a Kyverno report needs.
type Verdict struct {
	dialect.Verdict
	// Index is the validation's; -1 for an error of the whole policy.
	Index int
	// Ignored says the error lets the request pass: failurePolicy Ignore.
	Ignored bool
	// Unexplained says the validation has neither message nor
	// messageExpression: Message is the API server's "failed expression".
	Unexplained bool
}

// Judge is what p made of req; see Judgement.
func (p *Policy) Judge(ctx context.Context, req *dialect.Request) Judgement {
	var j Judgement
	seen := map[Verdict]bool{}
	add := func(v Verdict) {
		if !seen[v] {
			seen[v] = true
			j.Verdicts = append(j.Verdicts, v)
		}
	}
	ignore := p.failure == admissionregistrationv1.Ignore
	configErr := func(err error) {
		add(Verdict{Verdict: dialect.Verdict{Status: "error", Message: err.Error(), Line: p.line}, Index: -1, Ignored: ignore})
	}
	j.Applies = p.dispatch(ctx, req, configErr, func(b *binding, res *result) {
		if res.unmatched {
			return
		}
		j.Conditions = true
		if res.ignored != "" {
			add(Verdict{Verdict: dialect.Verdict{Status: "error", Message: res.ignored, Line: p.line}, Index: -1, Ignored: true})
		}
		warn := !b.denies()
		for _, d := range res.decisions {
			v := Verdict{Verdict: dialect.Verdict{Rule: d.rule, Status: "pass", Message: d.message, Line: p.line}, Index: validationIndex(d.rule)}
			for _, r := range p.rules {
				if r.Name == d.rule {
					v.Line = r.Line
				}
			}
			switch {
			case d.err:
				v.Status, v.Ignored = "error", d.admit
				v.Warn = warn && !d.always
			case d.admit:
			default:
				v.Status, v.Warn = "fail", warn
				if i := v.Index; i >= 0 && i < len(p.program.validations) {
					pv := p.program.validations[i]
					v.Unexplained = strings.TrimSpace(pv.message) == "" && pv.messageExpression == ""
				}
			}
			add(v)
		}
	})
	return j
}

// Verdicts implements dialect.Explainer: a verdict for each validation
// of each binding that takes the request in, an error that keeps the
// policy from being judged included; an error failurePolicy Ignore lets
// pass is a skip. A policy whose match constraints or conditions leave
// the request out gives none.
func (p *Policy) Verdicts(ctx context.Context, req *dialect.Request) []dialect.Verdict {
	var out []dialect.Verdict
	for _, v := range p.Judge(ctx, req).Verdicts {
		d := v.Verdict
		if v.Ignored {
			d.Status, d.Message = "skip", "ignored (failurePolicy Ignore): "+d.Message
		}
		out = append(out, d)
	}
	return out
}

// denies says a failed validation of the binding refuses the request.
func (b *binding) denies() bool {
	for _, a := range b.actions {
		if a == admissionregistrationv1.Deny {
			return true
		}
	}
	return false
}

// validationIndex is i of "validations[i]"; -1 for another name.
func validationIndex(rule string) int {
	s, ok := strings.CutPrefix(rule, "validations[")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(strings.TrimSuffix(s, "]"))
	if err != nil {
		return -1
	}
	return i
}

var _ dialect.Explainer = (*Policy)(nil)
