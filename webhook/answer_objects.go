package webhook

import (
	"context"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/quantumnode/qn-admission/policies"
)

// Objects are a request's object and oldObject already decoded, each by
// DecodeObject, so one request can be judged more than once (qnctl impact
// asks two policy sets, each webhook in turn) and each object decoded once.
type Objects struct {
	Object, OldObject ast.Value
}

// DecodeObject decodes request.object or request.oldObject (field) with
// the webhook's rules: strict, duplicate keys refused, of the kind the
// request says. nil when absent.
func DecodeObject(field string, raw []byte, req *admissionv1.AdmissionRequest) (ast.Value, error) {
	return decodeObject(field, raw, req)
}

// AnswerObjects is Answer for a request whose objects are already decoded
// (DecodeObject of this request's own object and oldObject).
func AnswerObjects(ctx context.Context, d Decider, req *admissionv1.AdmissionRequest, objs Objects, path policies.Path, now time.Time) (*admissionv1.AdmissionReview, *policies.Input, policies.Decision) {
	return answerDecoded(ctx, d, req, &decodedObjects{object: objs.Object, oldObject: objs.OldObject}, path, now)
}
