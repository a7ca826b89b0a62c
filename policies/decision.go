package policies

import (
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Decision is the engine's answer to one request. The webhook maps it onto
// an AdmissionResponse in one place.
type Decision struct {
	Allowed bool
	// Code is the HTTP-style status code the apiserver shows the user:
	// 200 allowed, 400 malformed, 403 forbidden by policy, 429 rate window
	// full, 500 our own failure.
	Code   int32
	Reason metav1.StatusReason
	// Message is one sentence a person can act on (every reason, joined).
	Message  string
	Warnings []string
	// Patch is a JSONPatch (RFC 6902) document; only mutations carry one,
	// and only when the object actually changes.
	Patch []byte
	// Reasons are the individual deny messages, for the decision log.
	Reasons []string
	// Role and Revision say which role and policy revision decided.
	Role     string
	Revision string
	// Exempt names the exemption that admitted the request unjudged.
	Exempt string
	// WouldDeny holds denials a warn or dryrun role (or package) did not
	// enforce.
	WouldDeny []string
	// Denials are every refusal the request met, enforced or not, each
	// with what refused it and what its enforcement did; Findings are the
	// policies' warn entries with their source. Impact reports and shadow
	// comparisons group by them; qn_admission_would_deny_total counts the
	// unenforced denials.
	Denials  []Finding
	Findings []Finding
	// Window is the requester's window after this request, for roles with one.
	Window *WindowState
	// WindowStore says how the window store served the request (mode,
	// latency, failure), when it is a guarded store.
	WindowStore *WindowStoreReport
	// PatchOps counts the operations in Patch.
	PatchOps int
	// RetryAfter is, for a full rate window, when a slot frees; the
	// webhook sends it as status.details.retryAfterSeconds, which the
	// apiserver returns to the client as a Retry-After header.
	RetryAfter time.Duration
	// PolicyFailed is set when the answer comes from the role's onError
	// (an evaluation or window error), allowed or not: strict health
	// counts these.
	PolicyFailed bool
	// CallerGone is set when the change was not judged because its caller
	// went away before it was counted in its rate window (CallerGone): no
	// slot was taken, and nobody reads the answer.
	CallerGone bool
}

// Allow admits with optional warnings.
func Allow(warnings ...string) Decision {
	return Decision{Allowed: true, Code: http.StatusOK, Warnings: warnings}
}

// Deny refuses with a code, a machine reason and a message for a person.
func Deny(code int32, reason metav1.StatusReason, message string) Decision {
	return Decision{Code: code, Reason: reason, Message: message}
}

// BadRequest refuses a request that is malformed or crafted.
func BadRequest(message string) Decision {
	return Deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, message)
}

// TooManyRequests refuses a change because the rate window is full.
func TooManyRequests(message string) Decision {
	return Deny(http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, message)
}

// InternalError refuses because the engine could not reach a decision.
func InternalError(message string) Decision {
	return Deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, message)
}

// Finding is one deny or warn entry and what produced it.
type Finding struct {
	// Source is the Rego package or pattern policy as roles.yaml lists
	// it, or SourceRoleTable, SourceWindow or SourceWindowStore.
	Source string `json:"source"`
	// Pattern says Source is a pattern policy, not a Rego package.
	Pattern bool   `json:"pattern,omitempty"`
	Message string `json:"message"`
	// Enforcement is what a denial did: deny refused the request, warn
	// returned it as a warning, dryrun only logged it.
	Enforcement Enforcement `json:"enforcement,omitempty"`
}

// Sources of denials that are not a policy of the role.
const (
	// SourceRoleTable: the role table refused the request (operation,
	// requesters, moveTo, delete).
	SourceRoleTable = RolesFile
	// SourceWindow: the role's rate window was full.
	SourceWindow = "window"
	// SourceWindowStore: the window store could not count and the role
	// fails closed.
	SourceWindowStore = "window store"
)
