package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Names of the HorizontalQNScaler kind and resource.
const (
	// ScalerKind is the kind of a single HorizontalQNScaler.
	ScalerKind = "HorizontalQNScaler"
	// ScalerListKind is the kind of a list of HorizontalQNScalers.
	ScalerListKind = "HorizontalQNScalerList"
	// ScalerResource is the plural resource name served by the apiserver.
	ScalerResource = "horizontalqnscalers"
	// ScalerShortName is the kubectl short name.
	ScalerShortName = "hqs"
)

var (
	// ScalerGroupVersionKind identifies a HorizontalQNScaler.
	ScalerGroupVersionKind = GroupVersion.WithKind(ScalerKind)
	// ScalerGroupVersionResource identifies the horizontalqnscalers resource.
	ScalerGroupVersionResource = GroupVersion.WithResource(ScalerResource)
)

// Annotations that pause a HorizontalQNScaler: while either is "true" the
// scaler neither queries Prometheus nor writes to its target. KEDA's key is
// honoured because it is the convention users of ScaledObjects know.
const (
	PausedAnnotation     = "qn.dev/paused"
	KEDAPausedAnnotation = "autoscaling.keda.sh/paused"
)

// Condition types of a HorizontalQNScaler; the first three are the
// HorizontalPodAutoscaler's names.
const (
	// ScalerAbleToScale is False when the scaler cannot read or write its
	// target's /scale (missing target, no scale subresource, a conflicting
	// scaler of the same target, a failed write).
	ScalerAbleToScale = "AbleToScale"
	// ScalerScalingActive is False when the scaler does not scale at all:
	// paused, the target at 0 replicas, or no metric to decide on.
	ScalerScalingActive = "ScalingActive"
	// ScalerScalingLimited is True when the replicas the rule asks for are
	// held at minReplicas or maxReplicas.
	ScalerScalingLimited = "ScalingLimited"
	// ScalerMetricAvailable is False when the last query failed, returned
	// no sample, several samples or a value that is not a number.
	ScalerMetricAvailable = "MetricAvailable"
)

// ScaleTargetRef names the object whose replicas the scaler sets: anything
// that serves the /scale subresource (Deployment, StatefulSet, ReplicaSet, a
// custom resource), in the scaler's namespace.
type ScaleTargetRef struct {
	// APIVersion of the target, e.g. apps/v1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`
	// Kind of the target, e.g. Deployment.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Name of the target.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SecretRef names a Secret in the scaler's namespace that holds what is
// needed to query Prometheus.
type SecretRef struct {
	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// TokenKey is the key of a bearer token sent as "Authorization: Bearer";
	// a missing key sends none.
	// +optional
	// +kubebuilder:default=token
	// +kubebuilder:validation:MaxLength=253
	TokenKey string `json:"tokenKey,omitempty"`
	// CAKey is the key of a PEM bundle of CA certificates that verifies an
	// https serverAddress, instead of the system's roots; a missing key
	// keeps the system's roots.
	// +optional
	// +kubebuilder:default=ca.crt
	// +kubebuilder:validation:MaxLength=253
	CAKey string `json:"caKey,omitempty"`
}

// QNMetric is the figure the scaler decides on.
type QNMetric struct {
	// Name names the figure, e.g. http_queue_length: status reasons,
	// conditions and events say "http_queue_length 17.2 > upper 15"
	// instead of "value 17.2 > upper 15", and qn_scaler_value carries it
	// as its metric label. Optional; a Prometheus metric name's
	// characters.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_][a-zA-Z0-9_]*$`
	Name string `json:"name,omitempty"`
	// Query is PromQL that returns one sample or a scalar, evaluated as an
	// instant query at every poll, e.g. sum(queue_depth{queue="orders"}).
	// Aggregate it (sum, max) when the series could be several.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`
	// ServerAddress is the Prometheus base URL (http or https, no query);
	// empty means qn-controller's --prometheus-url.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self == '' || isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https') && url(self).getQuery().size() == 0",message="must be an http or https URL without a query, e.g. http://prometheus.monitoring:9090"
	ServerAddress string `json:"serverAddress,omitempty"`
	// AuthSecretRef names a Secret with a bearer token and/or CA bundle for
	// ServerAddress.
	// +optional
	AuthSecretRef *SecretRef `json:"authSecretRef,omitempty"`
}

// Thresholds are the watermarks: above Upper the scaler adds replicas,
// below Lower it removes them, in between it holds (hysteresis).
// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self.upper)) || !isQuantity(string(self.lower)) || quantity(string(self.upper)).isGreaterThan(quantity(string(self.lower)))",message="upper must be greater than lower",fieldPath=".upper",reason=FieldValueInvalid
type Thresholds struct {
	// Upper: a value above it scales up by scaleUpStep.
	// +required
	Upper resource.Quantity `json:"upper"`
	// Lower: a value below it scales down by scaleDownStep.
	// +required
	Lower resource.Quantity `json:"lower"`
}

// Fallback sets the replicas when the metric cannot be read.
type Fallback struct {
	// FailureThreshold is how many polls in a row must fail before the
	// fallback replicas apply.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
	// Replicas the target gets while the metric stays unreadable; it must
	// lie within minReplicas and maxReplicas.
	// +required
	// +kubebuilder:validation:Minimum=1
	Replicas int32 `json:"replicas"`
}

// AbortOperator compares an abort condition's value with its threshold.
// +kubebuilder:validation:Enum=">";">=";"<";"<="
type AbortOperator string

// The comparisons an abort condition may use.
const (
	AbortAbove        AbortOperator = ">"
	AbortAboveOrEqual AbortOperator = ">="
	AbortBelow        AbortOperator = "<"
	AbortBelowOrEqual AbortOperator = "<="
)

// AbortCondition fails a stage when Query compared with Threshold holds,
// e.g. an error ratio > 0.005 or a p99 latency > 0.3 seconds.
type AbortCondition struct {
	// Name says what is watched, in events and status (e.g. error-ratio).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Query is PromQL returning one sample or a scalar.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`
	// Operator compares the query's value (left) with Threshold (right).
	// +required
	Operator AbortOperator `json:"operator"`
	// Threshold is the right-hand side of the comparison.
	// +required
	Threshold resource.Quantity `json:"threshold"`
}

// Stage is one step of a staged scale-up: the target is taken to Percent of
// the scale-up's added replicas and observed for ObserveSeconds; if an abort
// condition holds meanwhile, the target goes back to the replicas it had
// before the scale-up.
type Stage struct {
	// Percent of the scale-up's added replicas in place by the end of this
	// stage (cumulative; rounded up, at least one more replica than the
	// stage before). After the last stage the rest is added at once.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	Percent int32 `json:"percent"`
	// ObserveSeconds is how long the stage is watched before the next one.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	ObserveSeconds int32 `json:"observeSeconds"`
	// AbortWhen lists the conditions that roll the scale-up back.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	AbortWhen []AbortCondition `json:"abortWhen,omitempty"`
}

// HorizontalQNScalerSpec is the scaling rule.
//
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas",fieldPath=".minReplicas",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.fallback) || (self.fallback.replicas >= self.minReplicas && self.fallback.replicas <= self.maxReplicas)",message="fallback.replicas must lie within minReplicas and maxReplicas",fieldPath=".fallback.replicas",reason=FieldValueInvalid
type HorizontalQNScalerSpec struct {
	// ScaleTargetRef is the object whose /scale the scaler writes.
	// +required
	ScaleTargetRef ScaleTargetRef `json:"scaleTargetRef"`

	// MinReplicas is the fewest replicas the scaler sets.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MinReplicas int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the most replicas the scaler sets (at most 10,000).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxReplicas int32 `json:"maxReplicas"`

	// QNMetric is the PromQL figure the rule reads.
	// +required
	QNMetric QNMetric `json:"qnMetric"`

	// Thresholds are the upper and lower watermarks.
	// +required
	Thresholds Thresholds `json:"thresholds"`

	// ScaleUpStep is how many replicas one scale-up adds.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	ScaleUpStep int32 `json:"scaleUpStep,omitempty"`
	// ScaleDownStep is how many replicas one scale-down removes.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	ScaleDownStep int32 `json:"scaleDownStep,omitempty"`
	// ScaleUpCooldownSeconds is the least time between two scale-ups (an
	// aborted staged scale-up counts as one ending when it is rolled back).
	// 0 scales up at every poll the value is above upper.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	ScaleUpCooldownSeconds *int32 `json:"scaleUpCooldownSeconds,omitempty"`
	// StabilizationWindowSeconds is the scale-down cooldown: a scale-down
	// happens only once the value has stayed below lower for this long,
	// counted from the last scaling of either direction. It holds at every
	// replica count.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	StabilizationWindowSeconds *int32 `json:"stabilizationWindowSeconds,omitempty"`
	// PollingIntervalSeconds is how often the query runs.
	// +optional
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	PollingIntervalSeconds int32 `json:"pollingIntervalSeconds,omitempty"`

	// Fallback applies fixed replicas while the metric cannot be read;
	// without it the scaler holds the current replicas.
	// +optional
	Fallback *Fallback `json:"fallback,omitempty"`

	// Stages turn a scale-up into steps observed for abort conditions.
	// Their percents must increase.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.map(s, s.percent).isSorted() && self.all(s, self.exists_one(o, o.percent == s.percent))",message="stage percents must strictly increase (each is cumulative: the share of the scale-up in place by the end of that stage)"
	Stages []Stage `json:"stages,omitempty"`

	// DryRun decides and reports (status, events, metrics) but never
	// writes to the target.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// ScalerAction is what one decision did.
// +kubebuilder:validation:Enum=None;ScaleUp;ScaleDown;Hold;Fallback;StageAdvance;StageAbort
type ScalerAction string

// The actions of a decision.
const (
	// ActionNone: nothing was decided (paused, disabled, no target).
	ActionNone ScalerAction = "None"
	// ActionScaleUp: replicas were (or, in a dry run, would be) raised.
	ActionScaleUp ScalerAction = "ScaleUp"
	// ActionScaleDown: replicas were lowered.
	ActionScaleDown ScalerAction = "ScaleDown"
	// ActionHold: the rule asked for no change.
	ActionHold ScalerAction = "Hold"
	// ActionFallback: the fallback replicas applied.
	ActionFallback ScalerAction = "Fallback"
	// ActionStageAdvance: a staged scale-up moved to its next stage.
	ActionStageAdvance ScalerAction = "StageAdvance"
	// ActionStageAbort: an abort condition held; the scale-up was rolled back.
	ActionStageAbort ScalerAction = "StageAbort"
)

// ScalerDecision is one decision, explained.
type ScalerDecision struct {
	// Time the decision was made.
	Time metav1.Time `json:"time"`
	// Value the metric read, as text; empty when it could not be read.
	// +optional
	Value string `json:"value,omitempty"`
	// Upper and Lower are the thresholds the value was compared with.
	Upper resource.Quantity `json:"upper"`
	Lower resource.Quantity `json:"lower"`
	// Action taken.
	Action ScalerAction `json:"action"`
	// Replicas before and after the decision.
	FromReplicas int32 `json:"fromReplicas"`
	ToReplicas   int32 `json:"toReplicas"`
	// Reason in a sentence, e.g. "value 17.2 > upper 15: +2 replicas (4 → 6)".
	Reason string `json:"reason"`
}

// ScalerStageStatus is a staged scale-up in progress.
type ScalerStageStatus struct {
	// Index of the current stage, from 1.
	Index int32 `json:"index"`
	// Count of stages, the final step (the rest) excluded.
	Count int32 `json:"count"`
	// BaseReplicas the target had before the scale-up: where an abort
	// returns it.
	BaseReplicas int32 `json:"baseReplicas"`
	// TargetReplicas the whole scale-up ends at.
	TargetReplicas int32 `json:"targetReplicas"`
	// Replicas this stage set.
	Replicas int32 `json:"replicas"`
	// StartTime is when this stage's replicas were written.
	StartTime metav1.Time `json:"startTime"`
}

// HorizontalQNScalerStatus is what the scaler observed and did, written by
// qn-controller through the status subresource. The times in it are the
// scaler's memory (cooldowns, stabilization, stages): it keeps no state
// outside the API server.
type HorizontalQNScalerStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// CurrentValue is the metric's last reading, as text.
	// +optional
	CurrentValue string `json:"currentValue,omitempty"`
	// CurrentReplicas is the target's spec.replicas as /scale reported it.
	// +optional
	CurrentReplicas int32 `json:"currentReplicas,omitempty"`
	// DesiredReplicas is what the rule asks for now.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas,omitempty"`
	// LastScaleTime is the last write to the target, either direction.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
	// LastScaleUpTime is the last scale-up (or stage rollback): the start
	// of the scale-up cooldown.
	// +optional
	LastScaleUpTime *metav1.Time `json:"lastScaleUpTime,omitempty"`
	// BelowLowerSince is when the value last went below lower and has
	// stayed there; empty when it is not below lower.
	// +optional
	BelowLowerSince *metav1.Time `json:"belowLowerSince,omitempty"`
	// MetricFailures counts the polls in a row whose query failed.
	// +optional
	MetricFailures int32 `json:"metricFailures,omitempty"`
	// LastDecision explains the latest decision.
	// +optional
	LastDecision *ScalerDecision `json:"lastDecision,omitempty"`
	// Stage is the staged scale-up in progress, if any.
	// +optional
	Stage *ScalerStageStatus `json:"stage,omitempty"`
	// Conditions: AbleToScale, ScalingActive, ScalingLimited, MetricAvailable.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// HorizontalQNScaler scales a workload on a PromQL figure: above the upper
// watermark it adds scaleUpStep replicas, below the lower one it removes
// scaleDownStep, with a scale-up cooldown, a scale-down stabilization
// window, a fallback when the metric is unreadable, and optional staged
// scale-ups that roll back on abort conditions. See docs/scaling.md.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=horizontalqnscalers,singular=horizontalqnscaler,shortName=hqs,scope=Namespaced
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.scaleTargetRef.name`
// +kubebuilder:printcolumn:name="Value",type=string,JSONPath=`.status.currentValue`
// +kubebuilder:printcolumn:name="Lower",type=string,JSONPath=`.spec.thresholds.lower`
// +kubebuilder:printcolumn:name="Upper",type=string,JSONPath=`.spec.thresholds.upper`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.currentReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HorizontalQNScaler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the scaling rule.
	// +required
	Spec HorizontalQNScalerSpec `json:"spec"`

	// Status is what the scaler observed and did.
	// +optional
	Status HorizontalQNScalerStatus `json:"status,omitempty"`
}

// HorizontalQNScalerList is a list of HorizontalQNScalers.
//
// +kubebuilder:object:root=true
type HorizontalQNScalerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the HorizontalQNScalers.
	Items []HorizontalQNScaler `json:"items"`
}

// Paused reports whether an annotation pauses the scaler.
func (s *HorizontalQNScaler) Paused() bool {
	return s.Annotations[PausedAnnotation] == "true" || s.Annotations[KEDAPausedAnnotation] == "true"
}

func init() {
	SchemeBuilder.Register(func(scheme *runtime.Scheme) error {
		scheme.AddKnownTypes(GroupVersion, &HorizontalQNScaler{}, &HorizontalQNScalerList{})
		return nil
	})
}
