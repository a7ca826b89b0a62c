package webhook

import (
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quantumnode/qn-admission/policies"
)

// decisionMessage is the msg of every request's decision line.
const decisionMessage = "admission decision"

// decisionLine is what one request's decision line says, in the order the
// line shows it. It is written either as slog attributes (attrs, for a
// DecisionLog of any handler) or straight to bytes (appendJSON, for
// DecisionLines): the same line, byte for byte, as slog.NewJSONHandler
// writes the attributes (TestDecisionLineIsSlogJSON). The direct form
// saves slog's attribute values and the json.Marshal it calls for every
// list and number with a fraction (about 3 % of a validate request's CPU).
type decisionLine struct {
	webhook  string
	allowed  bool
	outcome  string
	code     int
	request  *policies.RequestLogFields
	role     string
	revision string
	exempt   string
	// reasons, wouldDeny and warnings are shown when not nil.
	reasons, wouldDeny, warnings []string
	patchOps                     int
	window                       *policies.WindowState
	store                        *policies.WindowStoreReport
	latency                      time.Duration
	remote                       string
}

func newDecisionLine(req *http.Request, webhook string, in *policies.Input, d policies.Decision, elapsed time.Duration) decisionLine {
	l := decisionLine{webhook: webhook, allowed: d.Allowed, outcome: outcome(d), code: int(d.Code),
		role: field(d.Role), revision: d.Revision, exempt: field(d.Exempt), patchOps: d.PatchOps,
		window: d.Window, store: d.WindowStore, latency: elapsed, remote: req.RemoteAddr}
	if in != nil && in.Request != nil {
		r := policies.RequestLog(in.Request)
		l.request = &r
	}
	if !d.Allowed {
		reasons := d.Reasons
		if len(reasons) == 0 {
			reasons = []string{d.Message}
		}
		l.reasons = messages(reasons)
	}
	if len(d.WouldDeny) > 0 {
		l.wouldDeny = messages(d.WouldDeny)
	}
	if len(d.Warnings) > 0 {
		l.warnings = messages(d.Warnings)
	}
	return l
}

// milliseconds is how a line gives a duration: milliseconds with a
// microsecond fraction.
func milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (l *decisionLine) attrs() []slog.Attr {
	attrs := make([]slog.Attr, 0, 24)
	attrs = append(attrs,
		slog.String("webhook", l.webhook),
		slog.Bool("allowed", l.allowed),
		slog.String("decision", l.outcome),
		slog.Int("code", l.code),
	)
	if l.request != nil {
		attrs = l.request.Attrs(attrs)
	}
	attrs = append(attrs, slog.String("role", l.role), slog.String("revision", l.revision))
	if l.exempt != "" {
		attrs = append(attrs, slog.String("exempt", l.exempt))
	}
	for _, list := range []struct {
		key   string
		items []string
	}{{"reasons", l.reasons}, {"wouldDeny", l.wouldDeny}, {"warnings", l.warnings}} {
		if list.items != nil {
			attrs = append(attrs, slog.Any(list.key, list.items))
		}
	}
	attrs = append(attrs, slog.Int("patchOps", l.patchOps))
	if w := l.window; w != nil {
		attrs = append(attrs, slog.Group("window", slog.String("key", field(w.Key)), slog.Int("count", w.Count), slog.Int("limit", w.Limit)))
	}
	if s := l.store; s != nil {
		store := []any{slog.String("onStoreError", string(s.OnStoreError)), slog.Float64("latencyMs", milliseconds(s.Latency))}
		if s.Error != "" {
			store = append(store, slog.String("error", s.Error), slog.Bool("countedLocally", s.CountedLocally))
		}
		attrs = append(attrs, slog.Group("windowStore", store...))
	}
	attrs = append(attrs, slog.Float64("latencyMs", milliseconds(l.latency)))
	// Where the call came from: the address a NetworkPolicy must admit.
	return append(attrs, slog.String("remote", l.remote))
}

// appendJSON appends the line as slog.NewJSONHandler(w, nil) writes a
// record at t with attrs, newline included.
func (l *decisionLine) appendJSON(dst []byte, t time.Time) []byte {
	o := jsonObject{dst: append(dst, `{"time":"`...), quote: slogStrings}
	o.dst = t.AppendFormat(o.dst, time.RFC3339Nano)
	o.dst = append(o.dst, `","level":"INFO","msg":"`+decisionMessage+`"`...)
	o.some = true
	o.string("webhook", l.webhook)
	o.bool("allowed", l.allowed)
	o.string("decision", l.outcome)
	o.int("code", l.code)
	if r := l.request; r != nil {
		o.string("uid", r.UID)
		o.string("user", r.User)
		o.list("groups", r.Groups)
		o.string("operation", r.Operation)
		o.string("kind", r.Kind)
		o.string("namespace", r.Namespace)
		o.string("name", r.Name)
		o.bool("dryRun", r.DryRun)
	}
	o.string("role", l.role)
	o.string("revision", l.revision)
	if l.exempt != "" {
		o.string("exempt", l.exempt)
	}
	if l.reasons != nil {
		o.list("reasons", l.reasons)
	}
	if l.wouldDeny != nil {
		o.list("wouldDeny", l.wouldDeny)
	}
	if l.warnings != nil {
		o.list("warnings", l.warnings)
	}
	o.int("patchOps", l.patchOps)
	if w := l.window; w != nil {
		o.key("window")
		g := jsonObject{dst: o.dst, quote: slogStrings}
		g.string("key", field(w.Key))
		g.int("count", w.Count)
		g.int("limit", w.Limit)
		o.dst = g.end()
	}
	if s := l.store; s != nil {
		o.key("windowStore")
		g := jsonObject{dst: o.dst, quote: slogStrings}
		g.string("onStoreError", string(s.OnStoreError))
		g.float("latencyMs", milliseconds(s.Latency))
		if s.Error != "" {
			g.string("error", s.Error)
			g.bool("countedLocally", s.CountedLocally)
		}
		o.dst = g.end()
	}
	o.float("latencyMs", milliseconds(l.latency))
	o.string("remote", l.remote)
	return append(o.end(), '\n')
}

// The members of a decision line, written as slog's JSON handler writes
// them (a jsonObject quoting as slogStrings).

func (o *jsonObject) string(name, v string) { o.stringField(name, v, false) }

func (o *jsonObject) bool(name string, v bool) {
	o.key(name)
	o.dst = strconv.AppendBool(o.dst, v)
}

func (o *jsonObject) int(name string, v int) {
	o.key(name)
	o.dst = strconv.AppendInt(o.dst, int64(v), 10)
}

// float writes v as json.Marshal does, which slog calls for a float64:
// 'f' form from 1e-6 to 1e21, 'e' form (with e-7, not e-07) outside it.
// The durations written are never NaN or infinite.
func (o *jsonObject) float(name string, v float64) {
	o.key(name)
	format := byte('f')
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	start := len(o.dst)
	o.dst = strconv.AppendFloat(o.dst, v, format, -1, 64)
	if n := len(o.dst) - start; format == 'e' && n >= 4 && o.dst[len(o.dst)-4] == 'e' && o.dst[len(o.dst)-3] == '-' && o.dst[len(o.dst)-2] == '0' {
		o.dst[len(o.dst)-2] = o.dst[len(o.dst)-1]
		o.dst = o.dst[:len(o.dst)-1]
	}
}

// list writes a []string as slog does for slog.Any: through a json.Encoder
// that leaves HTML alone; nil is null.
func (o *jsonObject) list(name string, items []string) {
	o.key(name)
	if items == nil {
		o.dst = append(o.dst, "null"...)
		return
	}
	o.dst = append(o.dst, '[')
	for i, s := range items {
		if i > 0 {
			o.dst = append(o.dst, ',')
		}
		o.dst = appendQuoted(o.dst, s, jsonStringsNoHTML)
	}
	o.dst = append(o.dst, ']')
}

// lineBuffers recycles the buffers lines are built in.
var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeDecisionLine writes l to w in one Write.
func writeDecisionLine(w io.Writer, l *decisionLine, t time.Time) {
	buf := lineBuffers.Get().(*[]byte)
	*buf = l.appendJSON((*buf)[:0], t)
	_, _ = w.Write(*buf)
	// A line with long reasons may have grown the buffer; keep small ones.
	if cap(*buf) <= 16<<10 {
		lineBuffers.Put(buf)
	}
}
