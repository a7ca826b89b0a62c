package v1alpha1

// The reasons qn-controller writes into a HorizontalQNScaler's conditions
// and events. They are API (docs/scaling.md lists them; people and alerts
// match on them): a reason is never renamed, only added. The
// MetricAvailable reasons of a failed query (PrometheusUnreachable,
// QueryTimeout, QueryRejected, NoSample, SeveralSamples, NotANumber,
// AuthSecretUnreadable) are controller/scaler's QueryErrorKinds.

// Reasons of the AbleToScale condition.
const (
	// ScalerReasonReadyForNewScale: the target's /scale can be read and written.
	ScalerReasonReadyForNewScale = "ReadyForNewScale"
	// ScalerReasonDryRun: spec.dryRun; decisions are reported, never written.
	ScalerReasonDryRun = "DryRun"
	// ScalerReasonTargetNotFound: the target does not exist (deleted, misnamed).
	ScalerReasonTargetNotFound = "TargetNotFound"
	// ScalerReasonInvalidTarget: the API server serves no such kind, or the
	// kind has no /scale subresource.
	ScalerReasonInvalidTarget = "InvalidTarget"
	// ScalerReasonFailedGetScale: reading /scale failed otherwise (RBAC, the
	// API server).
	ScalerReasonFailedGetScale = "FailedGetScale"
	// ScalerReasonFailedUpdateScale: writing /scale failed.
	ScalerReasonFailedUpdateScale = "FailedUpdateScale"
	// ScalerReasonConflictingScaler: an older HorizontalQNScaler, a
	// HorizontalPodAutoscaler or a KEDA ScaledObject scales the same
	// target; this scaler reports but does not write.
	ScalerReasonConflictingScaler = "ConflictingScaler"
)

// Reasons of the ScalingActive condition (besides the target's reasons
// above, when the target cannot be read).
const (
	// ScalerReasonValidMetricFound: the query returns a value the rule decides on.
	ScalerReasonValidMetricFound = "ValidMetricFound"
	// ScalerReasonFailedGetMetric: the query failed; the replicas are held.
	ScalerReasonFailedGetMetric = "FailedGetMetric"
	// ScalerReasonFallbackApplied: the query failed spec.fallback.failureThreshold
	// polls in a row; the target is held at the fallback's replicas.
	ScalerReasonFallbackApplied = "FallbackApplied"
	// ScalerReasonPaused: a pause annotation is set.
	ScalerReasonPaused = "Paused"
	// ScalerReasonScalingDisabled: the target has 0 replicas; scaling resumes
	// when someone sets at least one (the HorizontalPodAutoscaler's rule).
	ScalerReasonScalingDisabled = "ScalingDisabled"
)

// Reasons of the ScalingLimited condition.
const (
	// ScalerReasonTooManyReplicas: the rule asks for more than maxReplicas.
	ScalerReasonTooManyReplicas = "TooManyReplicas"
	// ScalerReasonTooFewReplicas: the rule asks for fewer than minReplicas.
	ScalerReasonTooFewReplicas = "TooFewReplicas"
	// ScalerReasonDesiredWithinRange: the rule's replicas lie within the bounds.
	ScalerReasonDesiredWithinRange = "DesiredWithinRange"
)

// Reasons of the MetricAvailable condition besides the query errors'.
const (
	// ScalerReasonQuerySucceeded: the query returns one sample.
	ScalerReasonQuerySucceeded = "QuerySucceeded"
	// ScalerReasonNotQueried: the scaler is paused; the query does not run.
	ScalerReasonNotQueried = "NotQueried"
)

// Event reasons of a HorizontalQNScaler. ScaledUp, ScaledDown,
// FallbackApplied and StageAborted follow a write to the target;
// MetricUnavailable, ConflictingScaler and FailedUpdateScale a change of
// condition.
const (
	ScalerEventScaledUp          = "ScaledUp"
	ScalerEventScaledDown        = "ScaledDown"
	ScalerEventFallbackApplied   = "FallbackApplied"
	ScalerEventStageAborted      = "StageAborted"
	ScalerEventMetricUnavailable = "MetricUnavailable"
)
