package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HealthState is a QuantumNode's health as qn-controller judges it under a
// QuantumNodeHealthPolicy.
// +kubebuilder:validation:Enum=Healthy;Degraded;Failed;Isolated
type HealthState string

// The health states: Healthy → Degraded → Failed → Isolated
// (docs/controller.md has every transition).
const (
	// HealthHealthy: every signal the policy asks for is good.
	HealthHealthy HealthState = "Healthy"
	// HealthDegraded: a signal is bad, for less than its failure threshold.
	HealthDegraded HealthState = "Degraded"
	// HealthFailed: a signal is bad past its threshold; the ladder repairs.
	HealthFailed HealthState = "Failed"
	// HealthIsolated: repair did not help; the ladder stops and a person is
	// paged. Left only when every signal is good again.
	HealthIsolated HealthState = "Isolated"
)

// Condition types of self-healing and rollout.
const (
	// ConditionHealthy is True when status.health is Healthy; its reason
	// names the signal that is bad and its message says since when.
	ConditionHealthy = "Healthy"
	// ConditionProgressing reports the latest spec revision: True while it
	// is on its way or once it is Ready, False with ProgressDeadlineExceeded
	// when it was not Ready within spec.progressDeadlineSeconds.
	ConditionProgressing = "Progressing"
)

// RemediationAction is a rung of the ladder.
// +kubebuilder:validation:Enum=Restart;Reschedule;Rebuild
type RemediationAction string

// The rungs, in the order the ladder climbs them.
const (
	ActionRestart    RemediationAction = "Restart"
	ActionReschedule RemediationAction = "Reschedule"
	ActionRebuild    RemediationAction = "Rebuild"
)

// RemediationResult is how a step ended, or that it has not yet.
// +kubebuilder:validation:Enum=InProgress;Succeeded;Failed;DryRun;Abandoned
type RemediationResult string

// The results of a step.
const (
	// ResultInProgress: acted, waiting for the node to become Healthy
	// within the step's timeout.
	ResultInProgress RemediationResult = "InProgress"
	// ResultSucceeded: the node was Healthy again within the timeout.
	ResultSucceeded RemediationResult = "Succeeded"
	// ResultFailed: the timeout passed first (or the step could not act).
	ResultFailed RemediationResult = "Failed"
	// ResultDryRun: the policy is in dry run; nothing was done.
	ResultDryRun RemediationResult = "DryRun"
	// ResultAbandoned: the step stopped without a verdict (the policy no
	// longer selects the node, or its remediation was switched off).
	ResultAbandoned RemediationResult = "Abandoned"
)

// RemediationStatus is one step of the ladder for one node.
type RemediationStatus struct {
	// Action is the rung.
	// +required
	Action RemediationAction `json:"action"`
	// Attempt counts the attempts of this action within one climb, from 1.
	// +required
	Attempt int32 `json:"attempt"`
	// StartedAt is when the step acted (or would have, in a dry run).
	// +required
	StartedAt metav1.Time `json:"startedAt"`
	// FinishedAt is when it ended; unset while in progress.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Result is how it ended.
	// +required
	Result RemediationResult `json:"result"`
	// Message says what was done, to what, and why it ended.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// NodeBinding is the Node a Reschedule moved the QuantumNode to. It
// overrides spec.nodeName as long as spec.nodeName still reads SpecNodeName:
// the spec belongs to its owner (or GitOps) and is never rewritten, and a
// deliberate change of it wins.
type NodeBinding struct {
	// NodeName is the Node the QuantumNode runs on now.
	// +required
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// PreviousNodeName is the Node it was moved away from (cordoned and
	// tainted qn.dev/isolated).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PreviousNodeName string `json:"previousNodeName,omitempty"`
	// SpecNodeName is spec.nodeName when the binding was made ("" for a
	// node bound by the qn.dev/node label, which moved with it).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SpecNodeName string `json:"specNodeName,omitempty"`
	// Since is when the binding was made.
	// +required
	Since metav1.Time `json:"since"`
}

// RolloutStatus follows the QuantumNode's spec revisions, kept as
// ControllerRevisions named <QuantumNode name>-<hash>.
type RolloutStatus struct {
	// CurrentRevision names the revision of the current spec.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`
	// ReadyRevision names the last revision that was Ready.
	// +optional
	ReadyRevision string `json:"readyRevision,omitempty"`
	// StartedAt is when the current revision was first observed; the
	// progress deadline counts from it.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// LastRollback is the last rollback triggered for this node.
	// +optional
	LastRollback *RollbackRecord `json:"lastRollback,omitempty"`
}

// RollbackRecord describes one rollback, in status and in the
// qn.dev/rollback annotation.
type RollbackRecord struct {
	// ID identifies the rollback in events, status and the annotation.
	// +required
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// FromRevision and ToRevision are the revision numbers.
	// +required
	FromRevision int64 `json:"fromRevision"`
	// +required
	ToRevision int64 `json:"toRevision"`
	// Trigger says what triggered it.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Trigger string `json:"trigger"`
	// Performed says the spec was patched back; false when only reported
	// (automatic rollback off, dry run, or the write was refused).
	// +optional
	Performed bool `json:"performed,omitempty"`
	// At is when it was triggered.
	// +required
	At metav1.Time `json:"at"`
}

// Defaults of the rollout fields of the spec.
const (
	// DefaultRevisionHistoryLimit is spec.revisionHistoryLimit when unset.
	DefaultRevisionHistoryLimit = 10
	// DefaultProgressDeadlineSeconds is spec.progressDeadlineSeconds when unset.
	DefaultProgressDeadlineSeconds = 600
)

// HistoryLimit is spec.revisionHistoryLimit with its default.
func (s *QuantumNodeSpec) HistoryLimit() int {
	if s.RevisionHistoryLimit == nil {
		return DefaultRevisionHistoryLimit
	}
	return int(*s.RevisionHistoryLimit)
}

// ProgressDeadline is spec.progressDeadlineSeconds with its default.
func (s *QuantumNodeSpec) ProgressDeadline() int64 {
	if s.ProgressDeadlineSeconds == nil {
		return DefaultProgressDeadlineSeconds
	}
	return int64(*s.ProgressDeadlineSeconds)
}
