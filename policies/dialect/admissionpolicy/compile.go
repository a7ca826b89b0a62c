package admissionpolicy

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies/dialect"
)

// mode is the environment policies compile in: the one an API server
// checks a new policy against, so what loads here is what it accepts.
const mode = environment.NewExpressions

var (
	baseEnvOnce sync.Once
	baseEnv     *environment.EnvSet
)

// envSet is the API server's CEL environment at this module's Kubernetes
// version, built once (it takes milliseconds).
func envSet() *environment.EnvSet {
	baseEnvOnce.Do(func() { baseEnv = environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()) })
	return baseEnv
}

// program is a policy's CEL, compiled the way the API server's
// validating admission plugin compiles a ValidatingAdmissionPolicy
// (its compilePolicy): variables composed into every expression, match
// conditions, validations, message expressions and audit annotations.
type program struct {
	validations      []*validationCondition
	validationFilter plugincel.ConditionEvaluator
	messageFilter    plugincel.ConditionEvaluator
	auditFilter      plugincel.ConditionEvaluator
	matcher          matchconditions.Matcher
	// rules are the validations as the audit reports them.
	rules []dialect.Rule
}

// checker collects the problems of one document.
type checker struct {
	doc      dialect.Document
	problems []*problem.Problem
}

func (c *checker) at(path []any, field, format string, args ...any) {
	c.problems = append(c.problems, &problem.Problem{File: c.doc.File, Line: lineAt(c.doc.Node, path...), Path: field, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) hint(h string) {
	c.problems[len(c.problems)-1].Hint = h
}

// field is a path as problems print it: ("spec", "validations", 0,
// "expression") reads spec.validations[0].expression.
func field(path ...any) string {
	var b strings.Builder
	for _, p := range path {
		switch k := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteString(".")
			}
			b.WriteString(k)
		case int:
			fmt.Fprintf(&b, "[%d]", k)
		}
	}
	return b.String()
}

func with(path []any, more ...any) []any {
	return append(slices.Clone(path), more...)
}

// compile checks and compiles spec. Every expression that does not
// compile is a problem at its line; one that uses a Kyverno library or
// reads what the webhook is not told says so.
func (c *checker) compile(spec *admissionregistrationv1.ValidatingAdmissionPolicySpec, name string) *program {
	before := len(c.problems)
	sp := []any{"spec"}
	if fp := spec.FailurePolicy; fp != nil && *fp != admissionregistrationv1.Fail && *fp != admissionregistrationv1.Ignore {
		c.at(with(sp, "failurePolicy"), "spec.failurePolicy", "%q is not a failure policy", *fp)
		c.hint("use Fail or Ignore")
	}
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		c.at(sp, "spec.validations", "a policy needs validations or auditAnnotations")
	}
	hasParams := spec.ParamKind != nil
	withAuthz := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	withoutAuthz := plugincel.OptionalVariableDeclarations{HasParams: hasParams}
	compiler, err := plugincel.NewCompositedCompiler(envSet())
	if err != nil {
		c.at(sp, "spec", "the CEL environment: %v", err)
		return nil
	}
	parseEnv, err := envSet().Env(mode)
	if err != nil {
		c.at(sp, "spec", "the CEL environment: %v", err)
		return nil
	}
	// check compiles one expression and reports why it cannot be used;
	// it returns what the expression reads.
	check := func(path []any, a plugincel.ExpressionAccessor, opts plugincel.OptionalVariableDeclarations, compileErr func() error) *reads {
		r := readsOf(parseEnv, a.GetExpression())
		f := field(path...)
		if strings.TrimSpace(a.GetExpression()) == "" {
			c.at(path, f, "an expression is required")
			return r
		}
		if err := compileErr(); err != nil {
			if r != nil {
				if l := r.kyverno(); l != nil {
					c.at(path, f, "uses Kyverno's %s, which %s", l.name, l.why)
					c.hint("write the rule with Kubernetes' CEL libraries, or keep it in Kyverno")
					return r
				}
			}
			c.at(path, f, "%v", err)
			return r
		}
		if r == nil {
			return r
		}
		if r.has("authorizer") {
			c.at(path, f, "reads authorizer, which needs the cluster's authorizer (a SubjectAccessReview): not supported offline")
			c.hint("check the requester's user and groups (request.userInfo) instead, or keep the rule in the API server")
		}
		if r.has("request.options") {
			c.at(path, f, "reads request.options, which qn-admission does not pass to CEL policies")
			c.hint("request.dryRun says whether the request is a dry run")
		}
		if ns := r.namespaceReads(); len(ns) > 0 {
			c.at(path, f, "reads %s: qn-admission is told a request's namespace name, not the namespace's labels, annotations or status", strings.Join(ns, ", "))
			c.hint("read namespaceObject.metadata.name or request.namespace only")
		}
		return r
	}
	compileOnly := func(a plugincel.ExpressionAccessor, opts plugincel.OptionalVariableDeclarations) func() error {
		return func() error {
			if res := compiler.CompileCELExpression(a, opts, mode); res.Error != nil {
				return res.Error
			}
			return nil
		}
	}

	// Variables, in order: each may read those before it.
	varReads := map[string][]string{}
	seen := map[string]bool{}
	for i, v := range spec.Variables {
		path := with(sp, "variables", i, "expression")
		if v.Name == "" || seen[v.Name] {
			c.at(with(sp, "variables", i, "name"), field(sp[0], "variables", i, "name"), "variables need unique, non-empty names (%q)", v.Name)
			continue
		}
		seen[v.Name] = true
		acc := &variable{name: v.Name, expression: v.Expression}
		r := check(path, acc, withAuthz, func() error {
			if res := compiler.CompileAndStoreVariable(acc, withAuthz, mode); res.Error != nil {
				return res.Error
			}
			return nil
		})
		varReads[v.Name] = requesterOf(r, varReads)
	}

	var common []string
	var matchAccessors []plugincel.ExpressionAccessor
	seenConditions := map[string]bool{}
	for i := range spec.MatchConditions {
		m := &spec.MatchConditions[i]
		if m.Name == "" || seenConditions[m.Name] {
			c.at(with(sp, "matchConditions", i, "name"), field("spec", "matchConditions", i, "name"), "match conditions need unique, non-empty names (%q)", m.Name)
		}
		seenConditions[m.Name] = true
		a := (*matchconditions.MatchCondition)(m)
		r := check(with(sp, "matchConditions", i, "expression"), a, withAuthz, compileOnly(a, withAuthz))
		common = append(common, requesterOf(r, varReads)...)
		matchAccessors = append(matchAccessors, a)
	}

	p := &program{}
	var validations, messages []plugincel.ExpressionAccessor
	for i, v := range spec.Validations {
		vp := with(sp, "validations", i)
		if v.Reason != nil && !slices.Contains([]metav1.StatusReason{metav1.StatusReasonUnauthorized, metav1.StatusReasonForbidden, metav1.StatusReasonInvalid, metav1.StatusReasonRequestEntityTooLarge}, *v.Reason) {
			c.at(with(vp, "reason"), field("spec", "validations", i, "reason"), "%q is not a reason a validation may give", *v.Reason)
			c.hint("use Unauthorized, Forbidden, Invalid or RequestEntityTooLarge")
		}
		if strings.ContainsAny(strings.TrimSpace(v.Message), "\r\n") {
			c.at(with(vp, "message"), field("spec", "validations", i, "message"), "a message is one line")
		}
		va := &validationCondition{expression: v.Expression, message: v.Message, reason: v.Reason, messageExpression: v.MessageExpression}
		r := check(with(vp, "expression"), va, withAuthz, compileOnly(va, withAuthz))
		requester := append(slices.Clone(common), requesterOf(r, varReads)...)
		var ma plugincel.ExpressionAccessor
		if v.MessageExpression != "" {
			mc := &messageCondition{expression: v.MessageExpression}
			mr := check(with(vp, "messageExpression"), mc, withoutAuthz, compileOnly(mc, withoutAuthz))
			requester = append(requester, requesterOf(mr, varReads)...)
			ma = mc
		}
		slices.Sort(requester)
		p.rules = append(p.rules, dialect.Rule{Name: ruleName(i), Line: lineAt(c.doc.Node, vp...), RequesterReads: slices.Compact(requester)})
		p.validations = append(p.validations, va)
		validations = append(validations, va)
		messages = append(messages, ma)
	}
	var audits []plugincel.ExpressionAccessor
	for i, a := range spec.AuditAnnotations {
		ap := with(sp, "auditAnnotations", i)
		if a.Key == "" {
			c.at(with(ap, "key"), field("spec", "auditAnnotations", i, "key"), "an audit annotation needs a key")
		}
		aa := &auditAnnotationCondition{key: a.Key, valueExpression: a.ValueExpression}
		check(with(ap, "valueExpression"), aa, withAuthz, compileOnly(aa, withAuthz))
		audits = append(audits, aa)
	}
	if len(c.problems) > before {
		return nil
	}
	if len(matchAccessors) > 0 {
		p.matcher = matchconditions.NewMatcher(compiler.CompileCondition(matchAccessors, withAuthz, mode), spec.FailurePolicy, "policy", "validate", name)
	}
	p.validationFilter = compiler.CompileCondition(validations, withAuthz, mode)
	// Each evaluation converts the admission request for CEL (half the
	// cost of a small policy): none is run for expressions a policy
	// does not have, which changes no answer.
	if slices.ContainsFunc(messages, func(a plugincel.ExpressionAccessor) bool { return a != nil }) {
		p.messageFilter = compiler.CompileCondition(messages, withoutAuthz, mode)
	}
	if len(audits) > 0 {
		p.auditFilter = compiler.CompileCondition(audits, withAuthz, mode)
	}
	return p
}

// ruleName names the i-th validation as the audit and messages do.
func ruleName(i int) string { return fmt.Sprintf("validations[%d]", i) }

// requesterOf is what r reads of the requester, directly or through the
// variables it reads.
func requesterOf(r *reads, varReads map[string][]string) []string {
	if r == nil {
		return nil
	}
	out := r.requester()
	for _, v := range r.variables() {
		out = append(out, varReads[v]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
