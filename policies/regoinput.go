package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// policyInput is the document Rego sees as input, in its JSON form. The
// fast builder below must produce exactly this (a test holds them equal).
type policyInput struct {
	Request *admissionv1.AdmissionRequest `json:"request"`
	Context Context                       `json:"context"`
}

// inputValue builds the parsed Rego input {"request": ..., "context": ...}
// straight from the typed request and the objects the webhook decoded, with
// no JSON round trip: this is the hot path of every decision.
func inputValue(in *Input, c Context) (ast.Value, error) {
	var request *ast.Term
	if in.Request == nil {
		request = ast.NullTerm()
	} else {
		obj, err := requestObject(in)
		if err != nil {
			return nil, err
		}
		request = ast.NewTerm(obj)
	}
	return ast.NewObject(
		ast.Item(ast.StringTerm("request"), request),
		ast.Item(ast.StringTerm("context"), ast.NewTerm(contextObject(c))),
	), nil
}

func requestObject(in *Input) (ast.Object, error) {
	r := in.Request
	o := ast.NewObject(
		strItem("uid", string(r.UID)),
		ast.Item(ast.StringTerm("kind"), gvkTerm(r.Kind)),
		ast.Item(ast.StringTerm("resource"), gvrTerm(r.Resource)),
		strItem("operation", string(r.Operation)),
		ast.Item(ast.StringTerm("userInfo"), userInfoTerm(r)),
	)
	optStr(o, "subResource", r.SubResource)
	if r.RequestKind != nil {
		o.Insert(ast.StringTerm("requestKind"), gvkTerm(*r.RequestKind))
	}
	if r.RequestResource != nil {
		o.Insert(ast.StringTerm("requestResource"), gvrTerm(*r.RequestResource))
	}
	optStr(o, "requestSubResource", r.RequestSubResource)
	optStr(o, "name", r.Name)
	optStr(o, "namespace", r.Namespace)
	for key, raw := range map[string]runtime.RawExtension{"object": r.Object, "oldObject": r.OldObject, "options": r.Options} {
		term, err := objectTerm(key, raw, in)
		if err != nil {
			return nil, err
		}
		o.Insert(ast.StringTerm(key), term)
	}
	if r.DryRun != nil {
		o.Insert(ast.StringTerm("dryRun"), ast.BooleanTerm(*r.DryRun))
	}
	return o, nil
}

// objectTerm uses the decoded object when the webhook has one, so policies
// judge exactly what was validated; options are small and parsed here.
func objectTerm(key string, raw runtime.RawExtension, in *Input) (*ast.Term, error) {
	var decoded map[string]any
	switch key {
	case "object":
		decoded = in.Object
	case "oldObject":
		decoded = in.OldObject
	}
	if decoded != nil {
		v, err := ast.InterfaceToValue(decoded)
		if err != nil {
			return nil, fmt.Errorf("convert request.%s for policies: %w", key, err)
		}
		return ast.NewTerm(v), nil
	}
	if len(bytes.TrimSpace(raw.Raw)) == 0 {
		return ast.NullTerm(), nil
	}
	v, err := ast.ValueFromReader(bytes.NewReader(raw.Raw))
	if err != nil {
		return nil, fmt.Errorf("parse request.%s for policies: %w", key, err)
	}
	return ast.NewTerm(v), nil
}

func userInfoTerm(r *admissionv1.AdmissionRequest) *ast.Term {
	u := r.UserInfo
	o := ast.NewObject()
	optStr(o, "username", u.Username)
	optStr(o, "uid", u.UID)
	if len(u.Groups) > 0 {
		o.Insert(ast.StringTerm("groups"), stringsTerm(u.Groups))
	}
	if len(u.Extra) > 0 {
		extra := ast.NewObject()
		for k, v := range u.Extra {
			extra.Insert(ast.StringTerm(k), stringsTerm(v))
		}
		o.Insert(ast.StringTerm("extra"), ast.NewTerm(extra))
	}
	return ast.NewTerm(o)
}

func contextObject(c Context) ast.Object {
	o := ast.NewObject(
		strItem("uid", c.UID),
		strItem("user", c.User),
		ast.Item(ast.StringTerm("groups"), stringsTerm(c.Groups)),
		strItem("operation", c.Operation),
		ast.Item(ast.StringTerm("kind"), ast.NewTerm(ast.NewObject(strItem("group", c.Kind.Group), strItem("version", c.Kind.Version), strItem("kind", c.Kind.Kind)))),
		ast.Item(ast.StringTerm("resource"), ast.NewTerm(ast.NewObject(strItem("group", c.Resource.Group), strItem("version", c.Resource.Version), strItem("resource", c.Resource.Resource)))),
		strItem("namespace", c.Namespace),
		strItem("name", c.Name),
		ast.Item(ast.StringTerm("labels"), stringMapTerm(c.Labels)),
		ast.Item(ast.StringTerm("annotations"), stringMapTerm(c.Annotations)),
		strItem("role", c.Role),
		ast.Item(ast.StringTerm("dryRun"), ast.BooleanTerm(c.DryRun)),
		strItem("time", c.Time.Format(time.RFC3339Nano)),
	)
	optStr(o, "userUID", c.UserUID)
	optStr(o, "subResource", c.SubResource)
	if len(c.Extra) > 0 {
		extra := ast.NewObject()
		for k, v := range c.Extra {
			extra.Insert(ast.StringTerm(k), stringsTerm(v))
		}
		o.Insert(ast.StringTerm("extra"), ast.NewTerm(extra))
	}
	if w := c.Window; w != nil {
		o.Insert(ast.StringTerm("window"), ast.NewTerm(ast.NewObject(
			strItem("key", w.Key),
			ast.Item(ast.StringTerm("count"), ast.IntNumberTerm(w.Count)),
			ast.Item(ast.StringTerm("limit"), ast.IntNumberTerm(w.Limit)),
			ast.Item(ast.StringTerm("periodSeconds"), ast.NumberTerm(json.Number(fmt.Sprint(w.PeriodSeconds)))),
			ast.Item(ast.StringTerm("remaining"), ast.IntNumberTerm(w.Remaining)),
		)))
	}
	return o
}

func gvkTerm(k metav1.GroupVersionKind) *ast.Term {
	return ast.NewTerm(ast.NewObject(strItem("group", k.Group), strItem("version", k.Version), strItem("kind", k.Kind)))
}

func gvrTerm(r metav1.GroupVersionResource) *ast.Term {
	return ast.NewTerm(ast.NewObject(strItem("group", r.Group), strItem("version", r.Version), strItem("resource", r.Resource)))
}

func strItem(k, v string) [2]*ast.Term { return ast.Item(ast.StringTerm(k), ast.StringTerm(v)) }

func optStr(o ast.Object, k, v string) {
	if v != "" {
		o.Insert(ast.StringTerm(k), ast.StringTerm(v))
	}
}

func stringsTerm(list []string) *ast.Term {
	terms := make([]*ast.Term, len(list))
	for i, s := range list {
		terms[i] = ast.StringTerm(s)
	}
	return ast.ArrayTerm(terms...)
}

func stringMapTerm(m map[string]string) *ast.Term {
	o := ast.NewObject()
	for k, v := range m {
		o.Insert(ast.StringTerm(k), ast.StringTerm(v))
	}
	return ast.NewTerm(o)
}
