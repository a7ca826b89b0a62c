package policies

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"go.yaml.in/yaml/v3"

	"github.com/quantumnode/qn-admission/rego"
)

// InventoryKind is one entry of roles.yaml's inventory: a kind of stored
// object qn-webhook watches and policies read as
// data.inventory.cluster[groupVersion][kind][name] (cluster-scoped) or
// data.inventory.namespace[namespace][groupVersion][kind][name].
type InventoryKind struct {
	// APIVersion is the group/version ("qn.dev/v1alpha1"), or the version
	// alone for the core group ("v1").
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// Line is where the entry is in roles.yaml, for errors found later
	// (a kind the API server does not serve).
	Line int `yaml:"-"`
}

// String names the kind as people write it ("v1 Node").
func (k InventoryKind) String() string { return k.APIVersion + " " + k.Kind }

// Inventory is the cluster's stored objects as policies read them.
type Inventory interface {
	// Document is the current inventory document (members cluster and
	// namespace), or an error saying why policies may not read it now:
	// not synced yet, or behind the API server past its bound. A policy
	// that reads the inventory then fails, and its role's onError decides.
	Document() (ast.Object, error)
}

var (
	apiVersionPattern = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$`)
	kindPattern       = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
)

// inventory checks roles.yaml's inventory list, each problem at its
// entry's line.
func (v *validator) inventory(t *RoleTable) {
	var node *yaml.Node
	for i := 0; i+1 < len(v.doc.Content); i += 2 {
		if v.doc.Content[i].Value == "inventory" {
			node = v.doc.Content[i+1]
		}
	}
	if node == nil {
		return
	}
	if node.Kind != yaml.SequenceNode {
		v.problems = append(v.problems, &Problem{File: v.file, Line: node.Line, Path: "inventory",
			Message: "inventory is a list of kinds, e.g. [{apiVersion: v1, kind: Node}]"})
		return
	}
	seen := map[InventoryKind]int{}
	for i, item := range node.Content {
		path := fmt.Sprintf("inventory[%d]", i)
		at := func(line int, format string, args ...any) {
			v.problems = append(v.problems, &Problem{File: v.file, Line: line, Path: path, Message: fmt.Sprintf(format, args...)})
		}
		if item.Kind != yaml.MappingNode {
			at(item.Line, "an inventory entry is {apiVersion, kind}, e.g. {apiVersion: v1, kind: Node}")
			continue
		}
		for j := 0; j+1 < len(item.Content); j += 2 {
			if k := item.Content[j].Value; k != "apiVersion" && k != "kind" {
				at(item.Content[j].Line, "unknown field %q (known here: apiVersion, kind)", k)
			}
		}
		if i >= len(t.Inventory) {
			continue
		}
		k := &t.Inventory[i]
		k.Line = item.Line
		switch {
		case k.APIVersion == "":
			at(item.Line, "apiVersion is missing (e.g. v1 or qn.dev/v1alpha1)")
		case !apiVersionPattern.MatchString(k.APIVersion):
			at(item.Line, "apiVersion %q is not group/version or a core version (e.g. v1, apps/v1, qn.dev/v1alpha1)", k.APIVersion)
		}
		switch {
		case k.Kind == "":
			at(item.Line, "kind is missing (e.g. Node)")
		case !kindPattern.MatchString(k.Kind):
			at(item.Line, "kind %q is not a kind name (CamelCase, singular: Node, not nodes)", k.Kind)
		}
		key := InventoryKind{APIVersion: k.APIVersion, Kind: k.Kind}
		if first, dup := seen[key]; dup {
			at(item.Line, "%s is already listed at line %d", key, first)
		}
		seen[key] = item.Line
		if strings.EqualFold(k.Kind, "Secret") && (k.APIVersion == "v1") {
			at(item.Line, "Secrets are not kept in the inventory: policies must not read other objects' secrets, and the webhook would need to read every Secret")
		}
	}
}

// withInventory gives the evaluation of p's query the inventory when the
// query reads it; the error is why it may not (not synced, stale), which
// the caller answers as a failed evaluation (the role's onError). A query
// that does not read the inventory is evaluated as it always was.
func (e *Engine) withInventory(ctx context.Context, q *rego.Query) (context.Context, error) {
	if e.inventory == nil || q == nil || !q.ReadsInventory() {
		return ctx, nil
	}
	doc, err := e.inventory.Document()
	if err != nil {
		return ctx, fmt.Errorf("the policies read the cluster inventory (data.inventory), which cannot be used now: %w", err)
	}
	return rego.WithInventory(ctx, doc), nil
}

// InventoryKinds are the kinds the set's role table asks the inventory to
// keep.
func (s *Set) InventoryKinds() []InventoryKind { return s.Roles.Inventory }

// ReadsInventory reports whether some role's queries read data.inventory.
func (s *Set) ReadsInventory() bool {
	for _, q := range s.validate {
		if q != nil && q.ReadsInventory() {
			return true
		}
	}
	for _, q := range s.mutate {
		if q != nil && q.ReadsInventory() {
			return true
		}
	}
	return false
}
