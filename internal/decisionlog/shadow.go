package decisionlog

import (
	"encoding/json"
	"log/slog"
	"time"
)

// Disagreement is the shadow's line for a request its candidate set
// answered differently from the served set: the request as the admission
// line names it, and both answers.
type Disagreement struct {
	Webhook string `json:"webhook"`
	Request
	// RequestTime is when the request was served, RFC 3339 in UTC.
	RequestTime string `json:"requestTime"`
	// From and To name the served and the shadow's answers in a word
	// (allowed, warned, denied; patched, unpatched).
	From   string `json:"from"`
	To     string `json:"to"`
	Served Answer `json:"served"`
	Shadow Answer `json:"shadow"`
}

// Answer is one side of a disagreement.
type Answer struct {
	Allowed  bool      `json:"allowed"`
	Code     int32     `json:"code"`
	Role     string    `json:"role,omitempty"`
	Revision string    `json:"revision,omitempty"`
	Message  string    `json:"message,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
	Patch    string    `json:"patch,omitempty"`
	Denials  []Finding `json:"denials,omitempty"`
	// Warned are the warn rules' entries, with their sources.
	Warned []Finding `json:"warned,omitempty"`
}

// Finding is one policy's entry in an answer, with its source.
type Finding struct {
	Source      string `json:"source"`
	Pattern     bool   `json:"pattern,omitempty"`
	Message     string `json:"message"`
	Enforcement string `json:"enforcement,omitempty"`
}

// Attrs are the line's members as slog attributes, for a record of
// ShadowMessage.
func (d *Disagreement) Attrs() []slog.Attr {
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs, slog.String("webhook", d.Webhook))
	attrs = d.Request.Attrs(attrs)
	return append(attrs,
		slog.String("requestTime", d.RequestTime),
		slog.String("from", d.From),
		slog.String("to", d.To),
		slog.Any("served", d.Served),
		slog.Any("shadow", d.Shadow),
	)
}

// Entry is one line of a decision log as a reader sees it: its time and
// message and, for a ShadowMessage, the disagreement.
type Entry struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	Disagreement
}

// Read decodes one line of a decision log; ok is false for a line that is
// not a JSON decision line.
func Read(line []byte) (e Entry, ok bool) {
	if json.Unmarshal(line, &e) != nil || e.Msg == "" {
		return Entry{}, false
	}
	return e, true
}

// RequestAt is when the disagreement's request was served, or the line's
// time when it does not say.
func (e *Entry) RequestAt() time.Time {
	if t, err := time.Parse(time.RFC3339Nano, e.RequestTime); err == nil {
		return t
	}
	return e.Time
}
