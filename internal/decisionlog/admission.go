package decisionlog

import (
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/quantumnode/qn-admission/internal/jsonwrite"
)

// Admission is what one request's decision line says, in the order the
// line shows it. It is written either as slog attributes (Attrs, for a
// logger of any handler) or straight to bytes (AppendJSON, Write): the
// same line, byte for byte, as slog.NewJSONHandler writes the attributes
// (TestAdmissionIsSlogJSON). The direct form saves slog's attribute values
// and the json.Marshal it calls for every list and number with a fraction
// (about 3 % of a validate request's CPU).
type Admission struct {
	Webhook  string
	Allowed  bool
	Decision string
	Code     int
	// Request is nil for a request that could not be read.
	Request  *Request
	Role     string
	Revision string
	// Exempt is shown when not empty.
	Exempt string
	// Reasons, WouldDeny and Warnings are shown when not nil.
	Reasons, WouldDeny, Warnings []string
	PatchOps                     int
	// Window and WindowStore are shown when not nil.
	Window      *Window
	WindowStore *WindowStore
	Latency     time.Duration
	// Remote is where the call came from: the address a NetworkPolicy must
	// admit.
	Remote string
}

// Window is the role's rate window as the request found it.
type Window struct {
	Key          string
	Count, Limit int
}

// WindowStore is how the shared window store answered.
type WindowStore struct {
	OnStoreError string
	Latency      time.Duration
	// Error, when not empty, is shown with CountedLocally.
	Error          string
	CountedLocally bool
}

// milliseconds is how a line gives a duration: milliseconds with a
// microsecond fraction.
func milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Attrs are the line's members as slog attributes, for a record of
// AdmissionMessage.
func (l *Admission) Attrs() []slog.Attr {
	attrs := make([]slog.Attr, 0, 24)
	attrs = append(attrs,
		slog.String("webhook", l.Webhook),
		slog.Bool("allowed", l.Allowed),
		slog.String("decision", l.Decision),
		slog.Int("code", l.Code),
	)
	if l.Request != nil {
		attrs = l.Request.Attrs(attrs)
	}
	attrs = append(attrs, slog.String("role", l.Role), slog.String("revision", l.Revision))
	if l.Exempt != "" {
		attrs = append(attrs, slog.String("exempt", l.Exempt))
	}
	for _, list := range []struct {
		key   string
		items []string
	}{{"reasons", l.Reasons}, {"wouldDeny", l.WouldDeny}, {"warnings", l.Warnings}} {
		if list.items != nil {
			attrs = append(attrs, slog.Any(list.key, list.items))
		}
	}
	attrs = append(attrs, slog.Int("patchOps", l.PatchOps))
	if w := l.Window; w != nil {
		attrs = append(attrs, slog.Group("window", slog.String("key", w.Key), slog.Int("count", w.Count), slog.Int("limit", w.Limit)))
	}
	if s := l.WindowStore; s != nil {
		store := []any{slog.String("onStoreError", s.OnStoreError), slog.Float64("latencyMs", milliseconds(s.Latency))}
		if s.Error != "" {
			store = append(store, slog.String("error", s.Error), slog.Bool("countedLocally", s.CountedLocally))
		}
		attrs = append(attrs, slog.Group("windowStore", store...))
	}
	attrs = append(attrs, slog.Float64("latencyMs", milliseconds(l.Latency)))
	return append(attrs, slog.String("remote", l.Remote))
}

// AppendJSON appends the line as slog.NewJSONHandler(w, nil) writes a
// record of AdmissionMessage at t with Attrs, newline included.
func (l *Admission) AppendJSON(dst []byte, t time.Time) []byte {
	dst = append(dst, `{"time":"`...)
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	o := jsonwrite.Within(append(dst, `","level":"INFO","msg":"`+AdmissionMessage+`"`...), jsonwrite.Slog)
	o.StringField("webhook", l.Webhook, false)
	o.Bool("allowed", l.Allowed)
	o.StringField("decision", l.Decision, false)
	o.Int("code", l.Code)
	if r := l.Request; r != nil {
		o.StringField("uid", r.UID, false)
		o.StringField("user", r.User, false)
		o.Strings("groups", r.Groups)
		o.StringField("operation", r.Operation, false)
		o.StringField("kind", r.Kind, false)
		o.StringField("namespace", r.Namespace, false)
		o.StringField("name", r.Name, false)
		o.Bool("dryRun", r.DryRun)
	}
	o.StringField("role", l.Role, false)
	o.StringField("revision", l.Revision, false)
	o.StringField("exempt", l.Exempt, true)
	if l.Reasons != nil {
		o.Strings("reasons", l.Reasons)
	}
	if l.WouldDeny != nil {
		o.Strings("wouldDeny", l.WouldDeny)
	}
	if l.Warnings != nil {
		o.Strings("warnings", l.Warnings)
	}
	o.Int("patchOps", l.PatchOps)
	if w := l.Window; w != nil {
		o.Key("window")
		g := jsonwrite.Object{Dst: o.Dst, Quote: jsonwrite.Slog}
		g.StringField("key", w.Key, false)
		g.Int("count", w.Count)
		g.Int("limit", w.Limit)
		o.Dst = g.End()
	}
	if s := l.WindowStore; s != nil {
		o.Key("windowStore")
		g := jsonwrite.Object{Dst: o.Dst, Quote: jsonwrite.Slog}
		g.StringField("onStoreError", s.OnStoreError, false)
		g.Float("latencyMs", milliseconds(s.Latency))
		if s.Error != "" {
			g.StringField("error", s.Error, false)
			g.Bool("countedLocally", s.CountedLocally)
		}
		o.Dst = g.End()
	}
	o.Float("latencyMs", milliseconds(l.Latency))
	o.StringField("remote", l.Remote, false)
	return append(o.End(), '\n')
}

// lineBuffers recycles the buffers lines are built in.
var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Write writes the line, as AppendJSON at t, to w in one Write.
func (l *Admission) Write(w io.Writer, t time.Time) {
	buf := lineBuffers.Get().(*[]byte)
	*buf = l.AppendJSON((*buf)[:0], t)
	_, _ = w.Write(*buf)
	// A line with long reasons may have grown the buffer; keep small ones.
	if cap(*buf) <= 16<<10 {
		lineBuffers.Put(buf)
	}
}
