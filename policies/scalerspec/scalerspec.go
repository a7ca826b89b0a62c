// Package scalerspec judges HorizontalQNScalers at admission: every PromQL
// query of a scaler (qnMetric.query and each stage's abort conditions)
// must parse with Prometheus' own parser, and a query that does not is
// refused with the parser's message and position. The CRD's CEL rules
// check everything else; CEL cannot parse PromQL.
//
// A query already stored is not judged again on UPDATE, so a scaler
// admitted before this check (or while the webhook was down) can still be
// paused or fixed.
package scalerspec

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
)

// promQL parses as permissively as a Prometheus server can be configured:
// experimental functions, duration expressions and extended selectors are
// accepted, so a query a user's server runs is never refused here (the
// server itself refuses what it has not enabled, and the scaler reports
// that in MetricAvailable).
var promQL = parser.NewParser(parser.Options{
	EnableExperimentalFunctions:  true,
	ExperimentalDurationExpr:     true,
	EnableExtendedRangeSelectors: true,
	EnableBinopFillModifiers:     true,
})

// Validator is the webhook's Decider for HorizontalQNScalers.
type Validator struct{}

// ObjectReads says it reads no object values: it decodes the request's
// bytes itself.
func (Validator) ObjectReads() *policies.ObjectReads { return policies.ContextObjectReads }

// ObjectReadsForKind is ObjectReads: no object values, whatever the kind.
func (Validator) ObjectReadsForKind(policies.GroupVersionKind) *policies.ObjectReads {
	return policies.ContextObjectReads
}

// Current is nil: scalers are judged by no policy set.
func (Validator) Current() *policies.Set { return nil }

// Validate admits a scaler whose new queries parse, and refuses one whose
// queries do not with 422 and every parse error, each with its field.
func (Validator) Validate(_ context.Context, in *policies.Input) policies.Decision {
	op := in.Request.Operation
	if op != "CREATE" && op != "UPDATE" {
		return policies.Allow()
	}
	obj, err := decode(in.Request.Object.Raw)
	if err != nil {
		return policies.BadRequest(fmt.Sprintf("request.object is not a HorizontalQNScaler: %v", err))
	}
	var old *qnv1alpha1.HorizontalQNScaler
	if op == "UPDATE" && len(in.Request.OldObject.Raw) > 0 {
		if old, err = decode(in.Request.OldObject.Raw); err != nil {
			return policies.BadRequest(fmt.Sprintf("request.oldObject is not a HorizontalQNScaler: %v", err))
		}
	}
	if problems := CheckQueries(obj, old); len(problems) > 0 {
		d := policies.Deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf("HorizontalQNScaler %s is invalid: %s", obj.Name, strings.Join(problems, "; ")))
		d.Reasons = problems
		return d
	}
	return policies.Allow()
}

// Mutate never changes a scaler.
func (Validator) Mutate(context.Context, *policies.Input) policies.Decision { return policies.Allow() }

func decode(raw []byte) (*qnv1alpha1.HorizontalQNScaler, error) {
	s := &qnv1alpha1.HorizontalQNScaler{}
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, err
	}
	return s, nil
}

// CheckQueries parses every query of s that old (nil on CREATE) does not
// hold at the same place, and returns one problem per query that does not
// parse: "spec.qnMetric.query: 1:16: parse error: unclosed left
// parenthesis".
func CheckQueries(s, old *qnv1alpha1.HorizontalQNScaler) []string {
	stored := map[string]string{}
	if old != nil {
		for path, q := range queries(old) {
			stored[path] = q
		}
	}
	var problems []string
	for _, pq := range orderedQueries(s) {
		if prev, ok := stored[pq.path]; ok && prev == pq.query {
			continue
		}
		if _, err := promQL.ParseExpr(pq.query); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s", pq.path, firstLine(err)))
		}
	}
	return problems
}

type pathQuery struct{ path, query string }

func orderedQueries(s *qnv1alpha1.HorizontalQNScaler) []pathQuery {
	out := []pathQuery{{"spec.qnMetric.query", s.Spec.QNMetric.Query}}
	for i, stage := range s.Spec.Stages {
		for j, c := range stage.AbortWhen {
			out = append(out, pathQuery{fmt.Sprintf("spec.stages[%d].abortWhen[%d].query", i, j), c.Query})
		}
	}
	return out
}

func queries(s *qnv1alpha1.HorizontalQNScaler) map[string]string {
	m := map[string]string{}
	for _, pq := range orderedQueries(s) {
		m[pq.path] = pq.query
	}
	return m
}

// firstLine keeps the parser's first error (it reports the first of
// several, with its position) on one line.
func firstLine(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}
