package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/policies"
)

// inputDecisionLog is qn-webhook's decision log, read for the
// disagreements its shadow policy set found on live traffic.
const inputDecisionLog = "decision log"

// Why decision log lines are not flips: each is counted in the report.
const (
	skipNotShadow    = "decision lines other than shadow disagreements (the shadow logs no agreement)"
	skipNotDecodable = "lines that are not JSON decision lines"
)

// readDecisionLogs reads the shadow's disagreements from qn-webhook's
// decision logs: each is a flip of the served set (base) to the shadow set
// (proposed), as the server judged it, on live traffic. It returns the
// revisions each side served, for the report's heading.
func (c *comparison) readDecisionLogs(_ context.Context, files []string, namespace string, s Streams) (served, shadow []string, err error) {
	for _, file := range files {
		f, name, err := openAuditLog(file, s.In)
		if err != nil {
			return nil, nil, err
		}
		report := &inputReport{Kind: inputDecisionLog, Source: name}
		c.inputs = append(c.inputs, report)
		br := bufio.NewReaderSize(f, 1<<20)
		for n := 1; ; n++ {
			raw, err := readLine(br)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return nil, nil, fmt.Errorf("%s:%d: %w", name, n, err)
			}
			if raw = bytes.TrimSpace(raw); len(raw) == 0 {
				continue
			}
			line, ok := decisionlog.Read(raw)
			if !ok {
				report.skip(skipNotDecodable)
				continue
			}
			if line.Msg != decisionlog.ShadowMessage {
				report.skip(skipNotShadow)
				continue
			}
			if namespace != "" && line.Namespace != namespace {
				continue
			}
			report.Judged++
			base, proposed := shadowSide(line.Served), shadowSide(line.Shadow)
			fl := compare(base, proposed)
			if fl == nil {
				continue // the same answer in every field impact compares
			}
			at := line.RequestAt()
			fl.seq, c.seq = c.seq, c.seq+1
			fl.Input, fl.Source, fl.Time = inputDecisionLog, fmt.Sprintf("%s:%d", name, n), &at
			fl.User, fl.Groups, fl.Operation, fl.Namespace, fl.Name = line.User, line.Groups, line.Operation, line.Namespace, line.Name
			if line.Served.Role != "" {
				fl.Role = line.Served.Role
			}
			c.flips = append(c.flips, *fl)
			served, shadow = appendNew(served, line.Served.Revision), appendNew(shadow, line.Shadow.Revision)
		}
		f.Close()
	}
	return served, shadow, nil
}

// shadowSide is one answer of a shadow disagreement as impact compares it.
func shadowSide(a decisionlog.Answer) impactSide {
	side := impactSide{Allowed: a.Allowed, Code: a.Code, Role: a.Role, Message: a.Message, Warnings: a.Warnings, Denials: findingsOf(a.Denials), findings: findingsOf(a.Warned)}
	if a.Patch != "" && json.Valid([]byte(a.Patch)) {
		side.Patch = json.RawMessage(a.Patch)
	}
	return side
}

// findingsOf are a line's findings as impact compares them.
func findingsOf(list []decisionlog.Finding) []policies.Finding {
	var out []policies.Finding
	for _, f := range list {
		out = append(out, policies.Finding{Source: f.Source, Pattern: f.Pattern, Message: f.Message, Enforcement: policies.Enforcement(f.Enforcement)})
	}
	return out
}

func appendNew(list []string, s string) []string {
	if s == "" || slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// revisionsOf names the revisions a side served over a decision log.
func revisionsOf(revisions []string) string {
	if len(revisions) == 0 {
		return "unknown"
	}
	return strings.Join(revisions, ", ")
}
