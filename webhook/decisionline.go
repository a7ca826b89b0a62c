package webhook

import (
	"net/http"
	"time"

	"github.com/quantumnode/qn-admission/internal/decisionlog"
	"github.com/quantumnode/qn-admission/policies"
)

// newDecisionLine is what one request's decision line says: its answer d,
// clipped where the caller controls it.
func newDecisionLine(req *http.Request, webhook string, in *policies.Input, d policies.Decision, elapsed time.Duration) decisionlog.Admission {
	l := decisionlog.Admission{Webhook: webhook, Allowed: d.Allowed, Decision: outcome(d), Code: int(d.Code),
		Role: field(d.Role), Revision: d.Revision, Exempt: field(d.Exempt), PatchOps: d.PatchOps,
		Latency: elapsed, Remote: req.RemoteAddr}
	hasRequest := in != nil && in.Request != nil
	if hasRequest || d.Window != nil || d.WindowStore != nil {
		// What the line points to escapes with it: one allocation for all.
		v := new(lineValues)
		if hasRequest {
			v.request = decisionlog.RequestOf(in.Request)
			l.Request = &v.request
		}
		if w := d.Window; w != nil {
			v.window = decisionlog.Window{Key: field(w.Key), Count: w.Count, Limit: w.Limit}
			l.Window = &v.window
		}
		if s := d.WindowStore; s != nil {
			v.store = decisionlog.WindowStore{OnStoreError: string(s.OnStoreError), Latency: s.Latency, Error: s.Error, CountedLocally: s.CountedLocally}
			l.WindowStore = &v.store
		}
	}
	if !d.Allowed {
		reasons := d.Reasons
		if len(reasons) == 0 {
			reasons = []string{d.Message}
		}
		l.Reasons = messages(reasons)
	}
	if len(d.WouldDeny) > 0 {
		l.WouldDeny = messages(d.WouldDeny)
	}
	if len(d.Warnings) > 0 {
		l.Warnings = messages(d.Warnings)
	}
	return l
}

// lineValues holds what a decision line points to.
type lineValues struct {
	request decisionlog.Request
	window  decisionlog.Window
	store   decisionlog.WindowStore
}
