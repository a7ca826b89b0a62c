package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/quantumnode/qn-admission/policies/dialect/admissionpolicy"
)

// The rows of the CEL policy kinds, as Kyverno's CLI (v1.19) reports
// them: a ValidatingPolicy or ValidatingAdmissionPolicy has no rules of
// its own, so it gives one result per resource whatever rule a row names,
// the first of its validations that does not hold deciding it:
//
//   - match constraints that leave the resource out: no result, and the
//     row passes as excluded, as for a ClusterPolicy's rule;
//   - match conditions that leave it out: skip;
//   - a validation that cannot be evaluated: error, whatever the
//     failurePolicy (Kyverno's engine applies it to match conditions only,
//     and reports the API server validator's error decisions as errors);
//   - a validation that does not hold: fail, whatever the policy's
//     validationActions or bindings say (the CLI reports no warn for
//     them), with its message; a ValidatingPolicy's validation without
//     message says "CEL expression validation failed at index N";
//   - else pass.
//
// A ValidatingPolicy's result has no rule name; a
// ValidatingAdmissionPolicy's is named for the policy. Kyverno's CLI judges
// a ValidatingAdmissionPolicy as a CREATE whatever the row's operation,
// and so does qnctl.

// celResult is the one result of a CEL policy on a resource.
type celResult struct {
	// excluded: the match constraints leave the resource out.
	excluded              bool
	rule, status, message string
}

// namedPolicy is a policy as a row names it.
type namedPolicy interface {
	Name() string
	Namespace() string
}

// rowCELPolicies are the CEL policies a row names, as rowPolicies.
func (j *kyvernoJudged) rowCELPolicies(name string) []int {
	ns, n, namespaced := strings.Cut(name, "/")
	if !namespaced {
		n = ns
	}
	var out []int
	for i, p := range j.cel {
		if p.Name() == n && (!namespaced || p.Namespace() == ns) {
			out = append(out, i)
		}
	}
	return out
}

// judgeCEL is the result of CEL policy pi on resource ri under op.
func (j *kyvernoJudged) judgeCEL(ctx context.Context, op string, ri, pi int) celResult {
	p := j.cel[pi]
	if p.Kind() == admissionpolicy.KindPolicy {
		op = "CREATE"
	}
	key := verdictKey{op: op, resource: ri, policy: pi}
	if res, ok := j.celResults[key]; ok {
		return res
	}
	res := kyvernoCELResult(p, p.Judge(ctx, j.request(op, j.resources[ri], p.Name())))
	j.celResults[key] = res
	return res
}

// kyvernoCELResult reduces a policy's verdicts to Kyverno's one result.
func kyvernoCELResult(p *admissionpolicy.Policy, jd admissionpolicy.Judgement) celResult {
	vap := p.Kind() == admissionpolicy.KindPolicy
	out := celResult{status: "pass"}
	if vap {
		out.rule = p.Name()
	}
	switch {
	case !jd.Applies:
		out.excluded = true
		return out
	case !jd.Conditions && len(jd.Verdicts) == 0:
		out.status, out.message = "skip", "match conditions aren't met"
		return out
	}
	for _, v := range jd.Verdicts {
		switch {
		case v.Status == "pass":
			continue
		case v.Status == "error":
			out.status, out.message = "error", v.Message
		default:
			out.status, out.message = "fail", v.Message
			if v.Unexplained && !vap {
				out.message = fmt.Sprintf("CEL expression validation failed at index %d", v.Index)
			}
		}
		return out
	}
	return out
}

// celRow compares row i, which names CEL policies, with their results.
func (j *kyvernoJudged) celRow(ctx context.Context, i int, base testResult, pols []int) []testResult {
	r := j.doc.Spec.Results[i]
	res, missing := j.rowResources(r)
	if len(missing) > 0 {
		tr := base
		tr.Name, tr.Failures = r.Policy, []string{fmt.Sprintf("resource %s is not among the test's resources (%s)", strings.Join(missing, ", "), j.resourceNames())}
		return []testResult{tr}
	}
	var out []testResult
	for _, ri := range res {
		for _, pi := range pols {
			start := time.Now()
			got := j.judgeCEL(ctx, r.Operation, ri, pi)
			label := j.resources[ri].label()
			tr := base
			tr.Name = policyLabel(j.cel[pi]) + " " + label
			if got.rule != "" {
				tr.Name = policyLabel(j.cel[pi]) + "/" + got.rule + " " + label
			}
			if got.excluded {
				tr.Passed = true
				tr.Answer = fmt.Sprintf("excluded: the match constraints of %s leave out %s; Kyverno's CLI passes the row whatever it expects (%s)", policyLabel(j.cel[pi]), label, r.Result)
				tr.Duration = time.Since(start)
				out = append(out, tr)
				continue
			}
			tr.Answer = got.status
			if got.message != "" {
				tr.Answer += ": " + got.message
			}
			if got.status != r.Result {
				tr.Failures = []string{fmt.Sprintf("want %s, got %s", r.Result, tr.Answer)}
			}
			tr.Passed = len(tr.Failures) == 0
			tr.Duration = time.Since(start)
			out = append(out, tr)
		}
	}
	return out
}
