// Package dialect is what the engine needs of a policy written as users
// already keep them outside Rego: a Kyverno ClusterPolicy or Policy, a
// Kubernetes ValidatingAdmissionPolicy with its bindings, a Kyverno
// ValidatingPolicy. Each dialect lives in its own package and offers a
// Reader; the policies package reads every YAML document of a policy
// directory, hands each reader the documents of the kinds it declares, and
// routes the Policies it returns by name through roles.yaml's
// `policies:` list, judging them beside the role's Rego and patterns.
//
// A document whose apiVersion belongs to a policy API (PolicyGroups) but
// whose kind no reader declares is a load error naming the file, line and
// kind: a policy file is never silently ignored.
package dialect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/internal/problem"
)

// Request is what a dialect policy judges: one admission request, or a
// stored object the audit judges as written again (Background).
type Request struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT.
	Operation string
	// Object and OldObject are request.object and request.oldObject
	// decoded (integers as int64); nil when absent.
	Object, OldObject map[string]any
	// UserInfo is request.userInfo; empty in the background.
	UserInfo authenticationv1.UserInfo
	// Kind and Resource are the request's; SubResource may be empty.
	Kind        metav1.GroupVersionKind
	Resource    metav1.GroupVersionResource
	SubResource string
	Name        string
	Namespace   string
	DryRun      bool
	// Background says there is no requester: a stored object judged by the
	// audit. Rules that read the requester are skipped, not passed.
	Background bool
}

// Finding is one rule of a policy that did not hold for a request.
type Finding struct {
	// Rule names the rule inside the policy ("" for a policy of one rule).
	Rule string
	// Message is the sentence a person reads.
	Message string
	// Warn makes the finding a warning instead of a denial (Kyverno's
	// failureAction: Audit, a binding's validationActions: [Warn]).
	Warn bool
	// Error says the rule could not be judged; Message says why. The
	// dialect has already applied its failure policy: an error finding
	// that denies is a denial.
	Error bool
}

// Rule is one rule of a policy as the audit reports it.
type Rule struct {
	Name string
	// Line is where the rule is declared in its file.
	Line int
	// RequesterReads are the parts of an admission request that a stored
	// object does not have which the rule reads (request.userInfo, ...):
	// the audit skips such a rule and says why.
	RequesterReads []string
}

// Policy is one loaded policy of a dialect. It is immutable and safe for
// concurrent use.
type Policy interface {
	// Name is what roles.yaml lists under a role's policies.
	Name() string
	// Kind is the document's kind (ClusterPolicy, ValidatingAdmissionPolicy...).
	Kind() string
	// File and Line say where the policy is declared.
	File() string
	Line() int
	// Rules are its rules, in declaration order.
	Rules() []Rule
	// Evaluate judges req and returns the findings of the rules that did
	// not hold; nil when every rule held or none applied.
	Evaluate(ctx context.Context, req *Request) []Finding
}

// Document is one YAML document of a policy directory's file.
type Document struct {
	// File is the file's path in the directory; Line is the document's
	// first line.
	File string
	Line int
	// APIVersion and Kind are the document's.
	APIVersion, Kind string
	// Node is the document as parsed, with line numbers.
	Node *yaml.Node
}

// Group is the API group of the document's apiVersion ("" for v1).
func (d Document) Group() string {
	g, _, found := strings.Cut(d.APIVersion, "/")
	if !found {
		return ""
	}
	return g
}

// Reader reads the documents of one dialect.
type Reader interface {
	// Kinds are the apiVersion/kind pairs the reader takes ("kyverno.io/v1
	// ClusterPolicy"), bindings and parameters included.
	Kinds() []string
	// Read turns the documents of the reader's kinds into policies, with a
	// problem for each document it cannot use, naming the file, line and
	// feature. Policy names must be unique within what it returns.
	Read(docs []Document) ([]Policy, []*problem.Problem)
}

// ParamsReader is a Reader whose policies take parameters from other
// documents of the directory (a ValidatingAdmissionPolicy's paramKind,
// any kind): it is handed, besides the documents of its kinds, every
// document of the directory no reader takes and no policy API declares.
type ParamsReader interface {
	Reader
	ReadWithParams(docs, others []Document) ([]Policy, []*problem.Problem)
}

// PolicyGroups are the API groups of policy documents: a document of one of
// these groups that no reader takes is a load error, never ignored.
var PolicyGroups = []string{"kyverno.io", "policies.kyverno.io", "admissionregistration.k8s.io", "templates.gatekeeper.sh", "constraints.gatekeeper.sh"}

// Key is a document's apiVersion and kind as Reader.Kinds lists them.
func Key(apiVersion, kind string) string { return apiVersion + " " + kind }

// Documents splits one YAML file into its documents that declare an
// apiVersion and a kind; others (comments, lists of cases) are skipped.
func Documents(file string, src []byte) ([]Document, error) {
	var docs []Document
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			return docs, err
		}
		if len(n.Content) == 0 || n.Content[0].Kind != yaml.MappingNode {
			continue
		}
		m := n.Content[0]
		av, k := scalarChild(m, "apiVersion"), scalarChild(m, "kind")
		if av == "" || k == "" {
			continue
		}
		docs = append(docs, Document{File: file, Line: m.Line, APIVersion: av, Kind: k, Node: m})
	}
}

func scalarChild(m *yaml.Node, key string) string {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i+1].Kind == yaml.ScalarNode {
			return m.Content[i+1].Value
		}
	}
	return ""
}

// Verdict is one rule's verdict on one request, for explanations.
type Verdict struct {
	Rule string
	// Status is pass, fail, skip or error.
	Status  string
	Message string
	// Warn: a failure only warns.
	Warn bool
	// Line is where the rule is declared.
	Line int
}

// Explainer is a Policy that can say what each of its rules made of a
// request, those that held included; a rule that does not apply to the
// request has no verdict.
type Explainer interface {
	Verdicts(ctx context.Context, req *Request) []Verdict
}

// JSONValue turns what yaml.v3 decodes into what encoding/json marshals:
// maps with non-string keys become maps of their keys' text. It changes v
// in place.
func JSONValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = JSONValue(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = JSONValue(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = JSONValue(e)
		}
	}
	return v
}

// JSON is the document as JSON, for a strict decode into its Go type.
func (d Document) JSON() ([]byte, error) {
	var v any
	if err := d.Node.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(JSONValue(v))
}
