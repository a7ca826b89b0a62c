package webhook

import (
	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/policies"
)

// decodedObjects are request.object and request.oldObject as Rego values,
// read in the same pass as the envelope (nil when absent or null), with
// what was read of them (nil: whole).
type decodedObjects struct {
	object, oldObject ast.Value
	reads             *policies.ObjectReads
}

// Paths whose bytes the one-pass decoder keeps: the RawExtensions, and
// the kind and resource pairs, decoded from their bytes (kindsByBytes).
var (
	pathObject          = []string{"request", "object"}
	pathOldObject       = []string{"request", "oldObject"}
	pathOptions         = []string{"request", "options"}
	pathKind            = []string{"request", "kind"}
	pathResource        = []string{"request", "resource"}
	pathRequestKind     = []string{"request", "requestKind"}
	pathRequestResource = []string{"request", "requestResource"}
)

// The captures' order in DecodeProjected's answer.
const (
	rawObject = iota
	rawOldObject
	rawOptions
	rawKind
	rawResource
	rawRequestKind
	rawRequestResource
)

// decodeReviewOnePass reads an AdmissionReview body once (internal/astjson)
// into the typed review and the objects' Rego values: the envelope and the
// objects used to be scanned three times (validated, decoded by
// sigs.k8s.io/json with the objects kept raw, then the objects decoded to
// Rego). ok is false for anything it does not decode exactly as
// sigs.k8s.io/json's strict, case-sensitive decoding would (a field it does
// not know, a null or a type it does not expect, a duplicate key, an object
// that is not a JSON object): the caller then decodes the body the old way,
// whose errors name the field. FuzzOnePassDecodingAgrees holds the two
// equal.
//
// The objects' values hold only what reads reads (nil: everything); the
// rest of them is checked as strictly but builds no value.
func decodeReviewOnePass(body []byte, reads *policies.ObjectReads) (rev *admissionv1.AdmissionReview, objs *decodedObjects, ok bool) {
	err := astjson.DecodeMembers(body, MaxRequestDepth, reads.Review(), func(top ast.Value, members []astjson.Member, raw [][]byte) error {
		if top != astjson.StreamedObject {
			return nil
		}
		rev = &admissionv1.AdmissionReview{}
		// The request's members come before the review's own place for it.
		r := &admissionv1.AdmissionRequest{}
		objs = &decodedObjects{reads: reads}
		for _, m := range members {
			ok := false
			switch m.Object {
			case policies.ReviewStream:
				ok = reviewMember(rev, r, m)
			case policies.RequestStream:
				ok = requestMember(r, m, raw, objs)
			case policies.UserInfoStream:
				ok = userInfoMember(&r.UserInfo, m)
			}
			if !ok {
				return nil
			}
		}
		ok = true
		return nil
	}, pathObject, pathOldObject, pathOptions, pathKind, pathResource, pathRequestKind, pathRequestResource)
	if err != nil || !ok {
		return nil, nil, false
	}
	return rev, objs, true
}

// reviewMember sets the review's member m; a member strict decoding
// refuses (or a response) is not ok, as is a request that is not an
// object.
func reviewMember(rev *admissionv1.AdmissionReview, r *admissionv1.AdmissionRequest, m astjson.Member) (ok bool) {
	switch m.Key {
	case "apiVersion":
		rev.APIVersion, ok = str(m.Value)
	case "kind":
		rev.Kind, ok = str(m.Value)
	case "request":
		rev.Request, ok = r, m.Value == astjson.StreamedObject
	}
	return ok
}

// requestMember sets the request's member m, as sigs.k8s.io/json would.
func requestMember(r *admissionv1.AdmissionRequest, m astjson.Member, raw [][]byte, objs *decodedObjects) (ok bool) {
	var s string
	val := m.Value
	switch m.Key {
	case "uid":
		s, ok = str(val)
		r.UID = types.UID(s)
	case "kind":
		r.Kind, ok = kindsByBytes.gvk(raw[rawKind])
	case "resource":
		r.Resource, ok = kindsByBytes.gvr(raw[rawResource])
	case "subResource":
		r.SubResource, ok = str(val)
	case "requestKind":
		var k metav1.GroupVersionKind
		k, ok = kindsByBytes.gvk(raw[rawRequestKind])
		r.RequestKind = &k
	case "requestResource":
		var res metav1.GroupVersionResource
		res, ok = kindsByBytes.gvr(raw[rawRequestResource])
		r.RequestResource = &res
	case "requestSubResource":
		r.RequestSubResource, ok = str(val)
	case "name":
		r.Name, ok = str(val)
	case "namespace":
		r.Namespace, ok = str(val)
	case "operation":
		s, ok = str(val)
		r.Operation = admissionv1.Operation(s)
	case "userInfo":
		// Its members are set already (userInfoMember); anything but an
		// object goes the old way.
		ok = val == astjson.StreamedObject
	case "object":
		r.Object, objs.object, ok = embedded(val, raw[rawObject], true)
	case "oldObject":
		r.OldObject, objs.oldObject, ok = embedded(val, raw[rawOldObject], true)
	case "options":
		r.Options, _, ok = embedded(val, raw[rawOptions], false)
	case "dryRun":
		b, isBool := val.(ast.Boolean)
		r.DryRun, ok = new(bool(b)), isBool
	}
	return ok
}

// userInfoMember sets the userInfo's member m.
func userInfoMember(u *authenticationv1.UserInfo, m astjson.Member) (ok bool) {
	switch m.Key {
	case "username":
		u.Username, ok = str(m.Value)
	case "uid":
		u.UID, ok = str(m.Value)
	case "groups":
		u.Groups, ok = stringList(m.Value)
	case "extra":
		u.Extra = map[string]authenticationv1.ExtraValue{}
		ok = eachMember(m.Value, func(name ast.String, list *ast.Term) (ok bool) {
			u.Extra[string(name)], ok = stringList(list.Value)
			return ok
		})
	}
	return ok
}

// eachMember calls member for each member of object v, until one returns
// false; false when t is not an object or a member was refused.
func eachMember(v ast.Value, member func(key ast.String, val *ast.Term) bool) bool {
	obj, isObj := v.(ast.Object)
	if !isObj {
		return false
	}
	ok := true
	obj.Until(func(k, val *ast.Term) bool {
		key, _ := k.Value.(ast.String)
		ok = member(key, val)
		return !ok
	})
	return ok
}

// embedded is a RawExtension member: its bytes as sigs.k8s.io/json keeps
// them (none for null), and its value when it must be an object.
func embedded(v ast.Value, raw []byte, object bool) (runtime.RawExtension, ast.Value, bool) {
	switch v.(type) {
	case ast.Null:
		return runtime.RawExtension{}, nil, true
	case ast.Object:
		return runtime.RawExtension{Raw: raw}, v, raw != nil
	}
	// Only options may be any JSON; an object that is not one gets the
	// old path's clear error.
	return runtime.RawExtension{Raw: raw}, nil, !object && raw != nil
}

func str(v ast.Value) (string, bool) {
	s, ok := v.(ast.String)
	return string(s), ok
}

// strings3 reads an object of at most the three string members keys
// name, and nothing else (as strict decoding refuses unknown fields). It
// looks the three up rather than iterating with a callback, whose
// closure and results would each be an allocation, four times a request.
func strings3(t *ast.Term, keys *[3]*ast.Term) ([3]string, bool) {
	var out [3]string
	obj, isObj := t.Value.(ast.Object)
	if !isObj {
		return out, false
	}
	found := 0
	for i, k := range keys {
		v := obj.Get(k)
		if v == nil {
			continue
		}
		s, isStr := v.Value.(ast.String)
		if !isStr {
			return out, false
		}
		out[i] = string(s)
		found++
	}
	return out, found == obj.Len()
}

var (
	gvkKeys = [3]*ast.Term{ast.StringTerm("group"), ast.StringTerm("version"), ast.StringTerm("kind")}
	gvrKeys = [3]*ast.Term{ast.StringTerm("group"), ast.StringTerm("version"), ast.StringTerm("resource")}
)

func gvk(t *ast.Term) (metav1.GroupVersionKind, bool) {
	f, ok := strings3(t, &gvkKeys)
	return metav1.GroupVersionKind{Group: f[0], Version: f[1], Kind: f[2]}, ok
}

func gvr(t *ast.Term) (metav1.GroupVersionResource, bool) {
	f, ok := strings3(t, &gvrKeys)
	return metav1.GroupVersionResource{Group: f[0], Version: f[1], Resource: f[2]}, ok
}

// stringList is a JSON array of strings; never nil, as sigs.k8s.io/json
// decodes [] to an empty slice.
func stringList(v ast.Value) ([]string, bool) {
	arr, isArr := v.(*ast.Array)
	if !isArr {
		return nil, false
	}
	out := make([]string, arr.Len())
	for i := range out {
		s, ok := arr.Elem(i).Value.(ast.String)
		if !ok {
			return nil, false
		}
		out[i] = string(s)
	}
	return out, true
}
