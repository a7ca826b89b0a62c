package v1alpha1

// The reasons qn-controller writes into the Healthy, Progressing and
// RemediationAllowed conditions and the events of self-healing and
// rollout. They are API, like the QuantumNode's own (reasons.go):
// docs/controller.md lists them, people and alerts match on them, so a
// reason is never renamed, only added. The Healthy condition also uses
// ReasonNodeNotReady and ReasonNodeNotFound, with the same meaning as on
// Ready.

// Reasons of the Healthy condition besides ReasonNodeNotReady and
// ReasonNodeNotFound.
const (
	// ReasonAllSignalsGood: every signal the policy asks for is good.
	ReasonAllSignalsGood = "AllSignalsGood"
	// ReasonProbeFailing: the active check of a port fails.
	ReasonProbeFailing = "ProbeFailing"
	// ReasonEndpointsNotReady: a port has too few ready endpoints.
	ReasonEndpointsNotReady = "EndpointsNotReady"
	// ReasonRestartsFailing: the isolation rule (failed restarts within
	// its window) isolated the node.
	ReasonRestartsFailing = "RestartsFailing"
	// ReasonLadderExhausted: every step of the ladder was tried and the
	// node is still not Healthy.
	ReasonLadderExhausted = "LadderExhausted"
)

// Reasons of the Progressing condition.
const (
	// ReasonRevisionReady: the current revision is Ready.
	ReasonRevisionReady = "RevisionReady"
	// ReasonRevisionProgressing: the current revision is not Ready yet,
	// within its deadline.
	ReasonRevisionProgressing = "RevisionProgressing"
	// ReasonProgressDeadlineExceeded: it was not Ready within
	// spec.progressDeadlineSeconds (also the reason of the event).
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
)

// Reasons of a QuantumNodeHealthPolicy's RemediationAllowed condition.
const (
	// ReasonRemediationAllowed: the guards let the policy remediate.
	ReasonRemediationAllowed = "Allowed"
	// ReasonTooManyUnhealthy: more than maxUnhealthy of the policy's nodes
	// are unhealthy; nothing is remediated until fewer are.
	ReasonTooManyUnhealthy = "TooManyUnhealthy"
	// ReasonRemediationPaused: the policy carries the pause annotation.
	ReasonRemediationPaused = "Paused"
	// ReasonReportOnly: the policy has no remediation step; health is
	// reported, nothing is repaired.
	ReasonReportOnly = "ReportOnly"
)

// Event reasons of self-healing and rollout.
const (
	// EventHealthDegraded: the node's health went to Degraded.
	EventHealthDegraded = "HealthDegraded"
	// EventHealthFailed: the node's health went to Failed.
	EventHealthFailed = "HealthFailed"
	// EventHealthRecovered: the node is Healthy again.
	EventHealthRecovered = "HealthRecovered"
	// EventIsolated: the node was isolated; a person is needed.
	EventIsolated = "Isolated"
	// EventRemediationStarted: a step of the ladder started (or acted).
	EventRemediationStarted = "RemediationStarted"
	// EventRemediationDryRun: a step a dry run only recorded.
	EventRemediationDryRun = "RemediationDryRun"
	// EventRemediationSucceeded: a step ended and the node is Healthy.
	EventRemediationSucceeded = "RemediationSucceeded"
	// EventRemediationFailed: a step ended without making the node Healthy,
	// or could not start.
	EventRemediationFailed = "RemediationFailed"
	// EventRemediationAbandoned: a running step was dropped (the node is
	// no longer selected by a policy).
	EventRemediationAbandoned = "RemediationAbandoned"
	// EventRemediationBlocked: a guard (pause, maxUnhealthy, maxInFlight)
	// holds a step back.
	EventRemediationBlocked = "RemediationBlocked"
	// EventRemediationPending: a step's effect waits (a
	// PodDisruptionBudget refused an eviction).
	EventRemediationPending = "RemediationPending"
	// EventPolicyCorrected: a policy's thresholds contradict each other;
	// the note says which value is used.
	EventPolicyCorrected = "PolicyCorrected"
	// EventRollbackTriggered: a rollback was triggered (performed or only
	// reported); the note carries its id, trigger and revisions.
	EventRollbackTriggered = "RollbackTriggered"
	// EventRollbackFailed: the rollback's write was refused.
	EventRollbackFailed = "RollbackFailed"
)
