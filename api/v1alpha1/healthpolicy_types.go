package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Names of the QuantumNodeHealthPolicy kind and resource.
const (
	// HealthPolicyKind is the kind of a single QuantumNodeHealthPolicy.
	HealthPolicyKind = "QuantumNodeHealthPolicy"
	// HealthPolicyListKind is the kind of a list of them.
	HealthPolicyListKind = "QuantumNodeHealthPolicyList"
	// HealthPolicyResource is the plural resource name.
	HealthPolicyResource = "quantumnodehealthpolicies"
)

// The label and annotation contract of self-healing. Labels are part of the
// API: workloads and operators set them, so they are never renamed.
const (
	// LabelQuantumNode names, on a Pod, the QuantumNode the Pod serves (in
	// the Pod's namespace). The Restart step evicts exactly the Pods that
	// carry it and run on the QuantumNode's Node. qn-controller also puts it
	// on the Service and the ControllerRevisions it owns. (NodeLabel, on a
	// Node, is the other half of the contract; Reschedule moves it.)
	LabelQuantumNode = "qn.dev/quantumnode"
	// TaintIsolated is the NoSchedule taint the Reschedule step puts on the
	// Node it moves a QuantumNode away from (with a cordon).
	TaintIsolated = "qn.dev/isolated"
	// AnnotationPauseRemediation pauses the remediation ladder: on a
	// QuantumNodeHealthPolicy for every node it selects, on a QuantumNode for
	// that node. Its value is the reason, shown in status and events. Health
	// is still assessed and reported.
	AnnotationPauseRemediation = "qn.dev/pause-remediation"
	// AnnotationRollback records, on a QuantumNode, the last rollback that
	// rewrote its spec: a JSON RollbackRecord.
	AnnotationRollback = "qn.dev/rollback"
)

// Durations are Go durations ("30s", "5m", "1h30m"); the schema refuses
// anything else, so a typo never reaches the controller's decoder.

// QuantumNodeHealthPolicySpec says how the health of the QuantumNodes it
// selects is judged and what qn-controller may do to repair them.
type QuantumNodeHealthPolicySpec struct {
	// Selector picks QuantumNodes by label, in every namespace. An empty
	// selector selects every QuantumNode. When several policies select a
	// node, the first by name applies.
	// +required
	Selector metav1.LabelSelector `json:"selector"`

	// Node judges the Kubernetes Node a QuantumNode runs on by its Ready
	// condition. Always on; the durations default as documented.
	// +optional
	Node NodeReadyCheck `json:"node,omitempty"`

	// Endpoints, when set, requires ready endpoints for every declared port
	// in the EndpointSlices of the QuantumNode's Service.
	// +optional
	Endpoints *EndpointsCheck `json:"endpoints,omitempty"`

	// Probe, when set, connects to each declared port on the Node's address
	// (TCP connect, or an HTTP GET of a path).
	// +optional
	Probe *ProbeCheck `json:"probe,omitempty"`

	// Remediation, when set, lets qn-controller repair Failed nodes with an
	// escalating ladder: Restart, then Reschedule, then Rebuild. Without it
	// the policy only reports health.
	// +optional
	Remediation *RemediationPolicy `json:"remediation,omitempty"`

	// Rollback, when set with automatic: true, rolls a QuantumNode's spec
	// back to its last Ready revision when a change is not Ready within its
	// progress deadline. Off by default: with Argo CD or Flux, Git holds the
	// spec and would re-apply it (docs/controller.md).
	// +optional
	Rollback *RollbackPolicy `json:"rollback,omitempty"`
}

// NodeReadyCheck holds the durations of the Node signal: a Node whose Ready
// condition has not been True for DegradedAfter makes its QuantumNode
// Degraded, for FailedAfter Failed.
type NodeReadyCheck struct {
	// DegradedAfter defaults to 30s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	DegradedAfter *metav1.Duration `json:"degradedAfter,omitempty"`
	// FailedAfter defaults to 5m; at least DegradedAfter.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	FailedAfter *metav1.Duration `json:"failedAfter,omitempty"`
}

// EndpointsCheck judges the EndpointSlices of a QuantumNode's Service (label
// kubernetes.io/service-name=<QuantumNode name>): every declared port needs
// MinReady ready endpoints.
type EndpointsCheck struct {
	// MinReady is the ready endpoints each port needs; default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinReady *int32 `json:"minReady,omitempty"`
	// DegradedAfter defaults to 0s: a port without enough ready endpoints
	// degrades the node at once.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	DegradedAfter *metav1.Duration `json:"degradedAfter,omitempty"`
	// FailedAfter defaults to 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	FailedAfter *metav1.Duration `json:"failedAfter,omitempty"`
}

// ProbeCheck is the active check: each declared port of the QuantumNode is
// checked on its Node's address every Period.
type ProbeCheck struct {
	// Period between two checks of a node; default 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Period *metav1.Duration `json:"period,omitempty"`
	// Timeout of one check; default 1s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// MaxConsecutiveFailures is the failed checks in a row a port may have
	// and leave the node Degraded; one more makes it Failed. Default 3
	// ("ping timeout > 3 → Failed").
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxConsecutiveFailures *int32 `json:"maxConsecutiveFailures,omitempty"`
	// Ports lists how each declared port is checked, by service name. A
	// declared port not listed is checked by TCP connect.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Ports []PortProbe `json:"ports,omitempty"`
}

// PortProbe says how one declared service is checked.
type PortProbe struct {
	// Name is the service's name in spec.services.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// HTTPPath, when set, checks the port with an HTTP GET of this path; a
	// status below 400 passes. Empty checks it by TCP connect.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	HTTPPath string `json:"httpPath,omitempty"`
	// Disabled leaves the port unchecked.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// RemediationPolicy configures the ladder and the guards that make it safe
// to switch on. A step left out is skipped; a ladder without steps only
// reports.
type RemediationPolicy struct {
	// Restart evicts the Pods that serve the QuantumNode (label
	// qn.dev/quantumnode=<name>, on its Node), through the Eviction API so
	// PodDisruptionBudgets hold; their owners recreate them.
	// +optional
	Restart *RestartStep `json:"restart,omitempty"`
	// Reschedule moves the QuantumNode to another Ready Node of its
	// architecture from a pool, cordons and taints the old Node and evicts
	// the Pods left on it.
	// +optional
	Reschedule *RescheduleStep `json:"reschedule,omitempty"`
	// Rebuild recreates the QuantumNode's owned objects from nothing and,
	// when opted in, deletes the Cluster API Machine behind the Node.
	// +optional
	Rebuild *RebuildStep `json:"rebuild,omitempty"`

	// MaxUnhealthy stops every remediation while more than this many of
	// the selected QuantumNodes are not Healthy (a count or a percentage;
	// default 40%): a cluster-wide outage is not repaired node by node.
	// +optional
	// +kubebuilder:validation:XIntOrString
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
	// MaxInFlight bounds the remediations of this policy's nodes running at
	// once, across the cluster; default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`
	// Isolation stops the ladder for a node whose restarts keep failing.
	// +optional
	Isolation *IsolationRule `json:"isolation,omitempty"`
	// DryRun records what the ladder would do (status, events, metrics)
	// and does nothing.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// RestartStep configures the first rung.
type RestartStep struct {
	// Timeout is how long the node gets to become Healthy after an
	// attempt; default 2m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Attempts before escalating; default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Attempts *int32 `json:"attempts,omitempty"`
}

// RescheduleStep configures the second rung.
type RescheduleStep struct {
	// Timeout defaults to 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// NodeSelector is the pool a QuantumNode may move to: Nodes with these
	// labels, Ready, schedulable, untainted by qn.dev/isolated, of the
	// QuantumNode's architecture and bound to no other QuantumNode.
	// +required
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
}

// RebuildStep configures the last rung.
type RebuildStep struct {
	// Timeout defaults to 10m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// DeleteMachine also deletes the Cluster API Machine behind the Node
	// (the Node's cluster.x-k8s.io/machine annotation), so its
	// MachineSet or control plane provider builds a new one.
	// +optional
	DeleteMachine bool `json:"deleteMachine,omitempty"`
}

// IsolationRule is the design's "two failed restarts within five minutes
// → Isolated". An Isolated node gets no further remediation; it pages.
type IsolationRule struct {
	// FailedRestarts within Window isolate the node; default 2.
	// +optional
	// +kubebuilder:validation:Minimum=1
	FailedRestarts *int32 `json:"failedRestarts,omitempty"`
	// Window defaults to 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Window *metav1.Duration `json:"window,omitempty"`
}

// RollbackPolicy configures what happens to a spec change that never
// became Ready.
type RollbackPolicy struct {
	// Automatic patches the spec back to the last revision that was Ready.
	// +optional
	Automatic bool `json:"automatic,omitempty"`
}

// Condition types of a QuantumNodeHealthPolicy.
const (
	// ConditionRemediationAllowed is False while the policy's guards stop
	// every remediation: too many unhealthy nodes, or paused.
	ConditionRemediationAllowed = "RemediationAllowed"
)

// QuantumNodeHealthPolicyStatus counts the nodes the policy selects.
type QuantumNodeHealthPolicyStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// SelectedNodes is how many QuantumNodes the policy applies to.
	// +optional
	SelectedNodes int32 `json:"selectedNodes"`
	// HealthyNodes are those whose status.health is Healthy.
	// +optional
	HealthyNodes int32 `json:"healthyNodes"`
	// UnhealthyNodes are Degraded, Failed or Isolated (what MaxUnhealthy
	// counts).
	// +optional
	UnhealthyNodes int32 `json:"unhealthyNodes"`
	// IsolatedNodes are Isolated.
	// +optional
	IsolatedNodes int32 `json:"isolatedNodes"`
	// RemediationsInFlight are the steps running now.
	// +optional
	RemediationsInFlight int32 `json:"remediationsInFlight"`
	// Conditions: RemediationAllowed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selectedNodes`
// +kubebuilder:printcolumn:name="Unhealthy",type=integer,JSONPath=`.status.unhealthyNodes`
// +kubebuilder:printcolumn:name="Isolated",type=integer,JSONPath=`.status.isolatedNodes`
// +kubebuilder:printcolumn:name="Allowed",type=string,JSONPath=`.status.conditions[?(@.type=="RemediationAllowed")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// QuantumNodeHealthPolicy sets the health thresholds and the repair ladder
// of the QuantumNodes it selects. Cluster-scoped: remediation cordons
// Nodes and may delete Machines, which is a cluster operator's decision.
// Changes apply at once, without a restart of qn-controller.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=quantumnodehealthpolicies,singular=quantumnodehealthpolicy,shortName=qnhp,scope=Cluster
type QuantumNodeHealthPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired behaviour.
	// +required
	Spec QuantumNodeHealthPolicySpec `json:"spec"`
	// Status is what qn-controller observed.
	// +optional
	Status QuantumNodeHealthPolicyStatus `json:"status,omitempty"`
}

// QuantumNodeHealthPolicyList is a list of QuantumNodeHealthPolicies.
//
// +kubebuilder:object:root=true
type QuantumNodeHealthPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []QuantumNodeHealthPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(scheme *runtime.Scheme) error {
		scheme.AddKnownTypes(GroupVersion, &QuantumNodeHealthPolicy{}, &QuantumNodeHealthPolicyList{})
		return nil
	})
}
