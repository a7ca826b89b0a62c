package decisionlog

import (
	"log/slog"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/quantumnode/qn-admission/internal/clip"
)

// Request is the request as a decision line names it (uid, requester,
// operation, kind, namespace, name, dry run), each caller-controlled value
// clipped. Both kinds of line carry it, with these names.
type Request struct {
	UID       string   `json:"uid"`
	User      string   `json:"user"`
	Groups    []string `json:"groups"`
	Operation string   `json:"operation"`
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	DryRun    bool     `json:"dryRun"`
}

// RequestOf is r's fields for a decision line.
func RequestOf(r *admissionv1.AdmissionRequest) Request {
	f := func(v string) string { return clip.String(v, clip.FieldBytes) }
	return Request{
		UID: f(string(r.UID)), User: f(r.UserInfo.Username),
		Groups:    clip.Strings(r.UserInfo.Groups, clip.ListItems, clip.FieldBytes),
		Operation: f(string(r.Operation)), Kind: f(r.Kind.Group + "/" + r.Kind.Kind),
		Namespace: f(r.Namespace), Name: f(r.Name), DryRun: r.DryRun != nil && *r.DryRun,
	}
}

// Attrs appends the fields to attrs, in the order a line shows them.
func (f Request) Attrs(attrs []slog.Attr) []slog.Attr {
	return append(attrs,
		slog.String("uid", f.UID),
		slog.String("user", f.User),
		slog.Any("groups", f.Groups),
		slog.String("operation", f.Operation),
		slog.String("kind", f.Kind),
		slog.String("namespace", f.Namespace),
		slog.String("name", f.Name),
		slog.Bool("dryRun", f.DryRun),
	)
}
