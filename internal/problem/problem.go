// Package problem is the one shape of "something is wrong at file:line":
// what a policy directory's role table, data, Rego modules and pattern
// policies, and qnctl's fixture files report, so every tool prints, sorts
// and serialises them alike. It is modelled on OPA's ast.Error and its
// Location.
package problem

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a file: where it is, what is wrong and
// how to fix it.
type Problem struct {
	// File is the file's path ("roles.yaml", "nodes.rego",
	// "fixtures/ssh.yaml"), or "." for a directory as a whole.
	File string `json:"file"`
	// Line and Column are 1-based; 0 when unknown.
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
	// Path is the field in a YAML file ("roles.realtime.window.limit"), or
	// the Rego test ("qn.quantumnode_test.test_arch") that failed.
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
	// Hint says how to fix it.
	Hint string `json:"hint,omitempty"`
}

// Error is "file:line: path: message", the column and hint left out as
// OPA's errors do.
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
	}
	if p.Path != "" {
		b.WriteString(": " + p.Path)
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

// Problems are every problem one pass found. As an error it is what a load
// returns when a directory cannot be served; errors.As finds it through the
// context callers add.
type Problems []*Problem

func (ps Problems) Error() string {
	if len(ps) == 1 {
		return ps[0].Error()
	}
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.Error()
	}
	return fmt.Sprintf("%d problems: %s", len(ps), strings.Join(msgs, "; "))
}

// Err is ps as an error, nil when there are none.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// Of returns the problems in err: the Problems or the Problem it wraps, or
// err as one problem of file when it carries none.
func Of(err error, file string) Problems {
	var ps Problems
	if errors.As(err, &ps) {
		return ps
	}
	var p *Problem
	if errors.As(err, &p) {
		return Problems{p}
	}
	return Problems{{File: file, Message: err.Error()}}
}

// FromYAML turns a YAML decoding error ("yaml: line 3: did not find
// expected key", or go-yaml's several "unmarshal errors") into a problem of
// file at its line.
func FromYAML(file string, err error) *Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	p := &Problem{File: file, Message: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, m, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				p.Line, p.Message = line, m
			}
		}
	}
	return p
}
