package admissionpolicy

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"

	"github.com/quantumnode/qn-admission/internal/problem"
	"github.com/quantumnode/qn-admission/policies/dialect"
)

// decode decodes doc into out (a pointer to a struct with json tags) as
// the API server would, strictly: a field the type does not have is a
// problem at its line, as is a value of the wrong type.
func decode(doc dialect.Document, out any) []*problem.Problem {
	var problems []*problem.Problem
	unknownFields(doc.Node, reflect.TypeOf(out).Elem(), "", func(n *yaml.Node, path string) {
		problems = append(problems, &problem.Problem{File: doc.File, Line: n.Line, Column: n.Column, Path: path,
			Message: "unknown field", Hint: fmt.Sprintf("%s %s has no such field; check its spelling against the API reference", doc.APIVersion, doc.Kind)})
	})
	if len(problems) > 0 {
		return problems
	}
	raw, err := doc.JSON()
	if err != nil {
		return []*problem.Problem{{File: doc.File, Line: doc.Line, Message: err.Error()}}
	}
	strict, err := kjson.UnmarshalStrict(raw, out, kjson.DisallowDuplicateFields)
	if err != nil {
		p := &problem.Problem{File: doc.File, Line: doc.Line, Message: strings.TrimPrefix(err.Error(), "json: ")}
		// "cannot unmarshal string into Go struct field Kind.spec.x of
		// type []v1.Validation": the field's path says the line.
		if m := typeError.FindStringSubmatch(p.Message); m != nil {
			p.Path, p.Line = m[2], lineOf(doc.Node, m[2])
			p.Message = fmt.Sprintf("a %s where %s is expected", m[1], m[3])
		}
		return []*problem.Problem{p}
	}
	for _, e := range strict {
		problems = append(problems, &problem.Problem{File: doc.File, Line: doc.Line, Message: strings.TrimPrefix(e.Error(), "json: ")})
	}
	return problems
}

var typeError = regexp.MustCompile(`^cannot unmarshal (.+) into Go struct field [^.]*\.(\S+) of type (.+)$`)

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// unknownFields walks n against t as encoding/json would fill it and
// reports every mapping key t has no field for.
func unknownFields(n *yaml.Node, t reflect.Type, path string, report func(*yaml.Node, string)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return
		}
		fields := jsonFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				report(k, join(path, k.Value))
				continue
			}
			unknownFields(v, ft, join(path, k.Value), report)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, e := range n.Content {
			unknownFields(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", report)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			unknownFields(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), report)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonFields are t's fields by JSON name, embedded structs' included.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range jsonFields(ft) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// lineOf is the line of the node at path ("spec.validations.expression",
// as encoding/json names a field, list indices left out: the first
// element that has the field is taken), or of the deepest node found.
func lineOf(n *yaml.Node, path string) int {
	line := n.Line
	for _, key := range strings.Split(path, ".") {
		for n.Kind == yaml.SequenceNode && len(n.Content) > 0 {
			next := n.Content[0]
			for _, e := range n.Content {
				if child(e, key) != nil {
					next = e
					break
				}
			}
			n = next
		}
		c := child(n, key)
		if c == nil {
			return line
		}
		n, line = c, c.Line
	}
	return line
}

// child is the value of key in the mapping n, nil when absent.
func child(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// childKey is the key node of key in the mapping n, nil when absent.
func childKey(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

// lineAt is the line of the node at a path of keys and indices
// ("spec", "validations", 2, "expression"), or of the deepest found.
func lineAt(n *yaml.Node, path ...any) int {
	line := n.Line
	for _, p := range path {
		var c *yaml.Node
		at := 0
		switch k := p.(type) {
		case string:
			// A field is where its key is: a block value starts below.
			if key := childKey(n, k); key != nil {
				c, at = child(n, k), key.Line
			}
		case int:
			if n.Kind == yaml.SequenceNode && k < len(n.Content) {
				c = n.Content[k]
				at = c.Line
			}
		}
		if c == nil {
			return line
		}
		n, line = c, at
	}
	return line
}
