package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantumnode/qn-admission/internal/astjson"
	"github.com/quantumnode/qn-admission/internal/cowcache"
	"github.com/quantumnode/qn-admission/rego"
)

// Keys of the input document, built once: a request allocates only values.
var (
	keyAnnotations        = ast.StringTerm("annotations")
	keyContext            = ast.StringTerm("context")
	keyCount              = ast.StringTerm("count")
	keyDryRun             = ast.StringTerm("dryRun")
	keyExtra              = ast.StringTerm("extra")
	keyGroup              = ast.StringTerm("group")
	keyGroups             = ast.StringTerm("groups")
	keyKey                = ast.StringTerm("key")
	keyKind               = ast.StringTerm("kind")
	keyLabels             = ast.StringTerm("labels")
	keyLimit              = ast.StringTerm("limit")
	keyManagedFields      = ast.StringTerm("managedFields")
	keyMetadata           = ast.StringTerm("metadata")
	keyName               = ast.StringTerm("name")
	keyObject             = ast.StringTerm("object")
	keyOldObject          = ast.StringTerm("oldObject")
	keyOptions            = ast.StringTerm("options")
	keyNamespace          = ast.StringTerm("namespace")
	keyOperation          = ast.StringTerm("operation")
	keyPeriodSeconds      = ast.StringTerm("periodSeconds")
	keyRemaining          = ast.StringTerm("remaining")
	keyRequest            = ast.StringTerm("request")
	keyRequestKind        = ast.StringTerm("requestKind")
	keyRequestResource    = ast.StringTerm("requestResource")
	keyRequestSubResource = ast.StringTerm("requestSubResource")
	keyResource           = ast.StringTerm("resource")
	keyRole               = ast.StringTerm("role")
	keySubResource        = ast.StringTerm("subResource")
	keyTime               = ast.StringTerm("time")
	keyUid                = ast.StringTerm("uid")
	keyUser               = ast.StringTerm("user")
	keyUserInfo           = ast.StringTerm("userInfo")
	keyUserUID            = ast.StringTerm("userUID")
	keyUsername           = ast.StringTerm("username")
	keyVersion            = ast.StringTerm("version")
	keyWindow             = ast.StringTerm("window")
)

// policyInput is the document Rego sees as input, in its JSON form. The
// fast builder below must produce exactly this (a test holds them equal).
type policyInput struct {
	Request *admissionv1.AdmissionRequest `json:"request"`
	Facts   Facts                         `json:"context"`
}

// inputValue builds the parsed Rego input {"request": ..., "context": ...}
// straight from the typed request and the objects the webhook decoded, with
// no JSON round trip: this is the hot path of every decision.
func inputValue(in *Input, c Facts) (ast.Value, error) {
	var b inputBuilder
	return b.input(in, c)
}

// managedFieldsPath is where an object's field-manager bookkeeping sits in
// the input: often most of an object's size, and read by no bundled policy.
var managedFieldsPath = []string{"request", "object", "metadata", "managedFields"}

// inputFields is the input a policy set's queries can read, found once when
// the set loads (rego.Compiled.MayReadInput): the members of input.request
// and input.context no policy may read, and whether managedFields may be
// left out. Leaving those out leaves every answer the same and saves
// building most of the input; TestFastPathMatchesReferenceEvaluation
// compares the projected input's answers with the full input's.
type inputFields struct {
	skipRequest, skipContext map[*ast.Term]bool
	dropManagedFields        bool
}

// Members of input.request and input.context the builder may leave out.
var (
	requestMembers = []*ast.Term{keyUid, keyKind, keyResource, keySubResource, keyRequestKind, keyRequestResource, keyRequestSubResource,
		keyName, keyNamespace, keyOperation, keyUserInfo, keyObject, keyOldObject, keyOptions, keyDryRun}
	contextMembers = []*ast.Term{keyUid, keyUser, keyUserUID, keyGroups, keyExtra, keyOperation, keyKind, keyResource, keySubResource,
		keyNamespace, keyName, keyLabels, keyAnnotations, keyRole, keyDryRun, keyTime, keyWindow}
)

func newInputFields(c *rego.Compiled) *inputFields {
	f := &inputFields{
		skipRequest: map[*ast.Term]bool{},
		skipContext: map[*ast.Term]bool{},
		dropManagedFields: !c.MayReadInput(managedFieldsPath...) &&
			!c.MayReadInput("request", "oldObject", "metadata", "managedFields"),
	}
	for _, k := range requestMembers {
		if !c.MayReadInput("request", string(k.Value.(ast.String))) {
			f.skipRequest[k] = true
		}
	}
	for _, k := range contextMembers {
		if !c.MayReadInput("context", string(k.Value.(ast.String))) {
			f.skipContext[k] = true
		}
	}
	return f
}

// policyInputValue is the input a policy set's queries evaluate: only what
// the set's policies may read (inputFields).
func policyInputValue(set *Set, in *Input, c Facts) (ast.Value, error) {
	var b inputBuilder
	if set != nil {
		b.fields = set.fields
	}
	return b.input(in, c)
}

// inputBuilder builds the input's terms from slabs (astjson.Terms): a
// request's input is a few hundred small values, and allocating them in
// slabs is a large share of the allocations saved per request.
type inputBuilder struct {
	terms astjson.Terms
	// fields leaves out what no policy reads; nil builds everything.
	fields *inputFields
}

func (b *inputBuilder) wantRequest(k *ast.Term) bool {
	return b.fields == nil || !b.fields.skipRequest[k]
}
func (b *inputBuilder) wantContext(k *ast.Term) bool {
	return b.fields == nil || !b.fields.skipContext[k]
}

func (b *inputBuilder) input(in *Input, c Facts) (ast.Value, error) {
	var request *ast.Term
	if in.Request == nil {
		request = ast.NullTerm()
	} else {
		obj, err := b.requestObject(in)
		if err != nil {
			return nil, err
		}
		request = b.terms.New(obj)
	}
	return b.document(request, b.contextObject(c)), nil
}

// document is the input of request's term and context.
func (b *inputBuilder) document(request *ast.Term, context ast.Object) ast.Value {
	return ast.NewObject(
		ast.Item(keyRequest, request),
		ast.Item(keyContext, b.terms.New(context)),
	)
}

// withWindow is input (policyInputValue's for set, built without a
// window) with w as input.context.window, as policyInputValue builds it:
// every other term is input's, not built again.
func withWindow(set *Set, input ast.Value, w *WindowState) ast.Value {
	var b inputBuilder
	if set != nil {
		b.fields = set.fields
	}
	doc := input.(ast.Object)
	context := doc.Get(keyContext).Value.(ast.Object)
	if w == nil || !b.wantContext(keyWindow) || context.Get(keyWindow) != nil {
		return input
	}
	items := make([][2]*ast.Term, 0, context.Len()+1)
	context.Foreach(func(k, v *ast.Term) { items = append(items, [2]*ast.Term{k, v}) })
	items = append(items, ast.Item(keyWindow, windowTerm(w)))
	return ast.NewObject(
		ast.Item(keyRequest, doc.Get(keyRequest)),
		ast.Item(keyContext, ast.NewTerm(ast.NewObject(items...))),
	)
}

func (b *inputBuilder) requestObject(in *Input) (ast.Object, error) {
	r := in.Request
	var buf [16][2]*ast.Term
	items := buf[:0]
	items = b.strMember(items, keyUid, string(r.UID), b.wantRequest(keyUid))
	if b.wantRequest(keyKind) {
		items = append(items, ast.Item(keyKind, kindTerm(r.Kind)))
	}
	if b.wantRequest(keyResource) {
		items = append(items, ast.Item(keyResource, resourceTerm(r.Resource)))
	}
	items = b.strMember(items, keyOperation, string(r.Operation), b.wantRequest(keyOperation))
	if b.wantRequest(keyUserInfo) {
		items = append(items, ast.Item(keyUserInfo, b.userInfoTerm(r)))
	}
	items = b.optStr(items, keySubResource, r.SubResource, b.wantRequest(keySubResource))
	if r.RequestKind != nil && b.wantRequest(keyRequestKind) {
		items = append(items, ast.Item(keyRequestKind, kindTerm(*r.RequestKind)))
	}
	if r.RequestResource != nil && b.wantRequest(keyRequestResource) {
		items = append(items, ast.Item(keyRequestResource, resourceTerm(*r.RequestResource)))
	}
	items = b.optStr(items, keyRequestSubResource, r.RequestSubResource, b.wantRequest(keyRequestSubResource))
	items = b.optStr(items, keyName, r.Name, b.wantRequest(keyName))
	items = b.optStr(items, keyNamespace, r.Namespace, b.wantRequest(keyNamespace))
	dropManagedFields := b.fields != nil && b.fields.dropManagedFields
	for _, f := range [...]struct {
		key     *ast.Term
		raw     runtime.RawExtension
		decoded map[string]any
		value   ast.Value
	}{{keyObject, r.Object, in.Object, in.ObjectValue}, {keyOldObject, r.OldObject, in.OldObject, in.OldObjectValue}, {keyOptions, r.Options, nil, nil}} {
		if !b.wantRequest(f.key) {
			continue
		}
		if f.value != nil {
			v := f.value
			if dropManagedFields {
				v = valueWithoutManagedFields(v)
			}
			items = append(items, ast.Item(f.key, b.terms.New(v)))
			continue
		}
		decoded := f.decoded
		if dropManagedFields {
			decoded = withoutManagedFields(decoded)
		}
		term, err := b.objectTerm(f.key, f.raw, decoded)
		if err != nil {
			return nil, err
		}
		items = append(items, ast.Item(f.key, term))
	}
	if r.DryRun != nil && b.wantRequest(keyDryRun) {
		items = append(items, ast.Item(keyDryRun, ast.BooleanTerm(*r.DryRun)))
	}
	return ast.NewObject(items...), nil
}

// objectTerm uses the decoded object when the webhook has one, so policies
// judge exactly what was validated; options are small and parsed here.
func (b *inputBuilder) objectTerm(key *ast.Term, raw runtime.RawExtension, decoded map[string]any) (*ast.Term, error) {
	if decoded != nil {
		v, err := astjson.ValueOf(decoded)
		if err != nil {
			return nil, fmt.Errorf("convert request.%v for policies: %w", key, err)
		}
		return b.terms.New(v), nil
	}
	if len(bytes.TrimSpace(raw.Raw)) == 0 {
		return ast.NullTerm(), nil
	}
	v, err := ast.ValueFromReader(bytes.NewReader(raw.Raw))
	if err != nil {
		return nil, fmt.Errorf("parse request.%v for policies: %w", key, err)
	}
	return b.terms.New(v), nil
}

// withoutManagedFields is obj without metadata.managedFields: a copy of the
// two maps on the way, the rest shared.
func withoutManagedFields(obj map[string]any) map[string]any {
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return obj
	}
	if _, has := meta["managedFields"]; !has {
		return obj
	}
	m := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" {
			m[k] = v
		}
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	out["metadata"] = m
	return out
}

// valueWithoutManagedFields is withoutManagedFields for an object decoded
// straight to a Rego value: a shallow copy of the object and its metadata,
// so the value the caller holds is left as it was.
func valueWithoutManagedFields(v ast.Value) ast.Value {
	obj, ok := v.(ast.Object)
	if !ok {
		return v
	}
	metaTerm := obj.Get(keyMetadata)
	if metaTerm == nil {
		return v
	}
	meta, ok := metaTerm.Value.(ast.Object)
	if !ok || meta.Get(keyManagedFields) == nil {
		return v
	}
	trimmed := ast.NewObjectWithCapacity(meta.Len() - 1)
	meta.Foreach(func(k, v *ast.Term) {
		if k.Value.Compare(keyManagedFields.Value) != 0 {
			trimmed.Insert(k, v)
		}
	})
	out := ast.NewObjectWithCapacity(obj.Len())
	obj.Foreach(func(k, v *ast.Term) {
		if k.Value.Compare(keyMetadata.Value) == 0 {
			v = ast.NewTerm(trimmed)
		}
		out.Insert(k, v)
	})
	return out
}

func (b *inputBuilder) userInfoTerm(r *admissionv1.AdmissionRequest) *ast.Term {
	u := r.UserInfo
	var buf [4][2]*ast.Term
	items := b.optStr(buf[:0], keyUsername, u.Username, true)
	items = b.optStr(items, keyUid, u.UID, true)
	if len(u.Groups) > 0 {
		items = append(items, ast.Item(keyGroups, b.stringsTerm(u.Groups)))
	}
	if len(u.Extra) > 0 {
		extra := ast.NewObject()
		for k, v := range u.Extra {
			extra.Insert(b.terms.New(b.terms.String(k)), b.stringsTerm(v))
		}
		items = append(items, ast.Item(keyExtra, b.terms.New(extra)))
	}
	return b.terms.New(ast.NewObject(items...))
}

func (b *inputBuilder) contextObject(c Facts) ast.Object {
	var buf [20][2]*ast.Term
	items := buf[:0]
	items = b.strMember(items, keyUid, c.UID, b.wantContext(keyUid))
	items = b.strMember(items, keyUser, c.User, b.wantContext(keyUser))
	if b.wantContext(keyGroups) {
		items = append(items, ast.Item(keyGroups, b.stringsTerm(c.Groups)))
	}
	items = b.strMember(items, keyOperation, c.Operation, b.wantContext(keyOperation))
	if b.wantContext(keyKind) {
		items = append(items, ast.Item(keyKind, kindTerm(metav1.GroupVersionKind(c.Kind))))
	}
	if b.wantContext(keyResource) {
		items = append(items, ast.Item(keyResource, resourceTerm(metav1.GroupVersionResource(c.Resource))))
	}
	items = b.strMember(items, keyNamespace, c.Namespace, b.wantContext(keyNamespace))
	items = b.strMember(items, keyName, c.Name, b.wantContext(keyName))
	if b.wantContext(keyLabels) {
		items = append(items, ast.Item(keyLabels, b.stringMapTerm(c.Labels, c.labelsValue)))
	}
	if b.wantContext(keyAnnotations) {
		items = append(items, ast.Item(keyAnnotations, b.stringMapTerm(c.Annotations, c.annotationsValue)))
	}
	items = b.strMember(items, keyRole, c.Role, b.wantContext(keyRole))
	if b.wantContext(keyDryRun) {
		items = append(items, ast.Item(keyDryRun, ast.BooleanTerm(c.DryRun)))
	}
	items = b.strMember(items, keyTime, c.Time.Format(time.RFC3339Nano), b.wantContext(keyTime))
	items = b.optStr(items, keyUserUID, c.UserUID, b.wantContext(keyUserUID))
	items = b.optStr(items, keySubResource, c.SubResource, b.wantContext(keySubResource))
	if len(c.Extra) > 0 && b.wantContext(keyExtra) {
		extra := ast.NewObject()
		for k, v := range c.Extra {
			extra.Insert(b.terms.New(b.terms.String(k)), b.stringsTerm(v))
		}
		items = append(items, ast.Item(keyExtra, b.terms.New(extra)))
	}
	if w := c.Window; w != nil && b.wantContext(keyWindow) {
		// Last, as withWindow adds it.
		items = append(items, ast.Item(keyWindow, windowTerm(w)))
	}
	return ast.NewObject(items...)
}

// windowTerm is input.context.window. Its few terms are allocated on their
// own: withWindow would otherwise start term slabs for them alone.
func windowTerm(w *WindowState) *ast.Term {
	return ast.NewTerm(ast.NewObject(
		ast.Item(keyKey, ast.StringTerm(w.Key)),
		ast.Item(keyCount, ast.IntNumberTerm(w.Count)),
		ast.Item(keyLimit, ast.IntNumberTerm(w.Limit)),
		ast.Item(keyPeriodSeconds, ast.NumberTerm(json.Number(fmt.Sprint(w.PeriodSeconds)))),
		ast.Item(keyRemaining, ast.IntNumberTerm(w.Remaining)),
	))
}

// kindTerms and resourceTerms hold the input's kind and resource objects,
// {group, version, kind} and {group, version, resource}: a webhook sees
// the same few in every request, each up to three times (request.kind,
// request.requestKind and context.kind), so each distinct one is built
// once and shared. Rego values are never changed once built.
var (
	kindTerms     cowcache.Cache[metav1.GroupVersionKind, *ast.Term]
	resourceTerms cowcache.Cache[metav1.GroupVersionResource, *ast.Term]
)

func kindTerm(k metav1.GroupVersionKind) *ast.Term {
	return sharedTerm(&kindTerms, k, func() ast.Value {
		return ast.NewObject(ownStringItem(keyGroup, k.Group), ownStringItem(keyVersion, k.Version), ownStringItem(keyKind, k.Kind))
	})
}

func resourceTerm(r metav1.GroupVersionResource) *ast.Term {
	return sharedTerm(&resourceTerms, r, func() ast.Value {
		return ast.NewObject(ownStringItem(keyGroup, r.Group), ownStringItem(keyVersion, r.Version), ownStringItem(keyResource, r.Resource))
	})
}

// ownStringItem is member k with a copy of v: a value kept for good does
// not hold on to the buffer its string may share (a decoder's arena).
func ownStringItem(k *ast.Term, v string) [2]*ast.Term {
	return ast.Item(k, ast.StringTerm(strings.Clone(v)))
}

// sharedTerm is the term cache holds for k, built and added when missing.
func sharedTerm[K comparable](cache *cowcache.Cache[K, *ast.Term], k K, build func() ast.Value) *ast.Term {
	if t, ok := cache.Get(k); ok {
		return t
	}
	t := ast.NewTerm(build())
	cache.Add(k, t)
	return t
}

func (b *inputBuilder) strItem(k *ast.Term, v string) [2]*ast.Term {
	return ast.Item(k, b.terms.New(b.terms.String(v)))
}

// strMember appends string member k when wanted.
func (b *inputBuilder) strMember(items [][2]*ast.Term, k *ast.Term, v string, wanted bool) [][2]*ast.Term {
	if wanted {
		items = append(items, b.strItem(k, v))
	}
	return items
}

// optStr appends member k when v is set and wanted.
func (b *inputBuilder) optStr(items [][2]*ast.Term, k *ast.Term, v string, wanted bool) [][2]*ast.Term {
	if v != "" && wanted {
		items = append(items, ast.Item(k, b.terms.New(b.terms.String(v))))
	}
	return items
}

func (b *inputBuilder) stringsTerm(list []string) *ast.Term {
	terms := make([]*ast.Term, len(list))
	for i, s := range list {
		terms[i] = b.terms.New(b.terms.String(s))
	}
	return b.terms.New(ast.NewArray(terms...))
}

// stringMapTerm is m as a Rego object: shared, when the caller has m's
// object already.
func (b *inputBuilder) stringMapTerm(m map[string]string, shared ast.Object) *ast.Term {
	if shared != nil {
		return b.terms.New(shared)
	}
	o := ast.NewObject()
	for k, v := range m {
		o.Insert(b.terms.New(b.terms.String(k)), b.terms.New(b.terms.String(v)))
	}
	return b.terms.New(o)
}
