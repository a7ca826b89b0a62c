// Package decisionlog defines qn-webhook's decision log, once: the line
// every admission request gets (Admission), the line the shadow writes when
// its candidate set answers a request differently (Disagreement), how each
// is written, and how a reader (qnctl impact --decision-log) reads them
// back. The lines are slog's JSON handler's: an Admission may also be
// written straight to bytes (Admission.Write), the same line byte for byte.
package decisionlog

// The msg of each kind of line.
const (
	// AdmissionMessage is the msg of every request's decision line.
	AdmissionMessage = "admission decision"
	// ShadowMessage is the msg of a shadow disagreement.
	ShadowMessage = "shadow disagreement"
)
