package pattern

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kyverno/kyverno/pkg/engine/anchor"
	"github.com/kyverno/kyverno/pkg/engine/operator"
	"github.com/kyverno/kyverno/pkg/policy/common"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
)

// parseAnchor is Kyverno's anchor parser: nil when key is a plain key.
func parseAnchor(key string) anchor.Anchor { return anchor.Parse(key) }

// validateAnchor says whether an anchor belongs in a validate pattern, as
// Kyverno's own policy validation does: conditional (), equality =(),
// existence ^(), negation X() and global <(); not add-if-not-present +(),
// which only mutates.
func validateAnchor(a anchor.Anchor) bool {
	return anchor.IsCondition(a) || anchor.IsExistence(a) || anchor.IsEquality(a) || anchor.IsNegation(a) || anchor.IsGlobal(a)
}

// validatePattern runs Kyverno's check of a validate pattern and returns
// where it failed (a Kyverno path) and why.
func validatePattern(v any) (string, error) {
	return common.ValidatePattern(v, "/", validateAnchor)
}

// checkKey refuses a key that looks like an anchor but is not one Kyverno
// would read as a validate anchor. Kubernetes field names, label and
// annotation keys never contain parentheses, so a key with one is always
// a misspelt anchor that would otherwise silently match nothing.
func checkKey(key string, val *yaml.Node) error {
	a := parseAnchor(key)
	if a == nil {
		if strings.ContainsAny(key, "()") {
			return fmt.Errorf("%q is not an anchor: write (key), =(key), ^(key), X(key) or <(key), with nothing outside the parentheses", key)
		}
		return nil
	}
	inner := a.Key()
	if strings.ContainsAny(inner, "()") {
		return fmt.Errorf("%q nests anchors in one key; anchors nest through the pattern's levels, not inside a key", key)
	}
	switch {
	case anchor.IsAddIfNotPresent(a):
		return fmt.Errorf("+() (add if not present) is a mutate anchor; a validate pattern takes (), =(), ^(), X() or <()")
	case anchor.IsExistence(a):
		if val.Kind != yaml.SequenceNode {
			return fmt.Errorf("an existence anchor ^() holds a list of patterns, at least one of which some element must match")
		}
		for _, c := range val.Content {
			if c.Kind != yaml.MappingNode {
				return fmt.Errorf("each pattern under an existence anchor ^() must be a mapping (Kyverno compares it with each element of the list)")
			}
		}
	}
	return nil
}

// checkValue refuses string patterns that use a Kyverno feature this
// engine does not run (variables, references) or an operator whose operand
// can never compare.
func checkValue(s string) error {
	if strings.Contains(s, "{{") {
		return fmt.Errorf("%q uses a JMESPath variable ({{ ... }}); variables are not supported here: use Rego for rules that need them", s)
	}
	if strings.Contains(s, "$(") {
		return fmt.Errorf("%q uses a $(...) reference; references are not supported here: use Rego for rules that compare two fields", s)
	}
	for _, alt := range strings.Split(s, "|") {
		for _, c := range strings.Split(alt, "&") {
			c = strings.TrimSpace(c)
			op := operator.GetOperatorFromStringPattern(c)
			switch op {
			case operator.More, operator.Less, operator.MoreEqual, operator.LessEqual:
				operand := strings.TrimSpace(c[len(op):])
				if !comparable(operand) {
					return fmt.Errorf("%q: %s needs a number, a quantity (500m, 2Gi) or a duration (30s) to compare with, not %q", s, op, operand)
				}
			}
		}
	}
	return nil
}

// comparable reports whether Kyverno's matcher can order values against s:
// it tries a duration, then a quantity; a plain number is a quantity.
func comparable(s string) bool {
	if _, err := time.ParseDuration(s); err == nil {
		return true
	}
	_, err := resource.ParseQuantity(s)
	return err == nil
}

// scalar decodes a YAML scalar into the type Kyverno's matcher expects.
// Integers become int64 (as in the decoded request), so a pattern 3 and a
// replica count 3 compare as numbers.
func scalar(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, err
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			// Beyond int64: keep the text, compared as a string.
			return n.Value, nil
		}
		return i, nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		return f, nil
	case "!!str", "!!timestamp", "!!binary":
		return n.Value, nil
	}
	return nil, fmt.Errorf("YAML tag %s is not a value a pattern can hold", n.ShortTag())
}

// rewritesMetadata reports whether Kyverno's matcher will write into the
// pattern: at every mapping it expands wildcard keys of metadata.labels and
// metadata.annotations by replacing those maps inside the pattern.
func rewritesMetadata(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if stripAnchor(k) == "metadata" {
				if md, ok := c.(map[string]any); ok {
					for mk := range md {
						if s := stripAnchor(mk); s == "labels" || s == "annotations" {
							return true
						}
					}
				}
			}
			if rewritesMetadata(c) {
				return true
			}
		}
	case []any:
		for _, c := range t {
			if rewritesMetadata(c) {
				return true
			}
		}
	}
	return false
}

func stripAnchor(k string) string {
	if a := parseAnchor(k); a != nil {
		return a.Key()
	}
	return k
}

// copyTree copies the maps and lists of a pattern; leaves are immutable.
func copyTree(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, c := range t {
			m[k] = copyTree(c)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, c := range t {
			l[i] = copyTree(c)
		}
		return l
	}
	return v
}

// lineOf traces a path Kyverno reports (/spec/containers/0/image/) back to
// the line of the pattern element that judged it. Anchored keys match by
// their inner key. A list of mappings or values judges every element with
// its first pattern, as Kyverno does; only nested lists align by index.
func (t *Tree) lineOf(kpath string) int {
	n := t.node
	line := t.Line
	for _, seg := range strings.Split(strings.Trim(kpath, "/"), "/") {
		if seg == "" {
			continue
		}
		switch n.Kind {
		case yaml.MappingNode:
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k := n.Content[i].Value; k == seg || stripAnchor(k) == seg {
					line, n, found = n.Content[i].Line, n.Content[i+1], true
					break
				}
			}
			if !found {
				return line
			}
		case yaml.SequenceNode:
			i, err := strconv.Atoi(seg)
			if err != nil || len(n.Content) == 0 {
				return line
			}
			if i >= len(n.Content) || n.Content[0].Kind != yaml.SequenceNode {
				i = 0
			}
			n = n.Content[i]
			line = n.Line
		default:
			return line
		}
	}
	return line
}
