package v1alpha1

// The reasons the controller writes into status.conditions and events, and
// the label it reads on Nodes. They live with the types because they are
// API: docs/controller.md lists them, and people and alerts match on them.

// Reasons of the NodeMatched, ServicesReady and Ready conditions. They are
// part of the API: people and alerts match on them, so a reason is never
// renamed, only added.
const (
	// ReasonNodeFound: the Node exists and has the declared architecture.
	ReasonNodeFound = "NodeFound"
	// ReasonNodeNotFound: no Node carries spec.nodeName or the qn.dev/node label.
	ReasonNodeNotFound = "NodeNotFound"
	// ReasonArchMismatch: the Node runs another architecture than spec.hardware.arch.
	ReasonArchMismatch = "ArchMismatch"
	// ReasonNodeArchUnknown: the Node has not reported its architecture yet
	// (the kubelet fills status.nodeInfo after it registers).
	ReasonNodeArchUnknown = "NodeArchUnknown"
	// ReasonNodeNotReady: the Node matches but its Ready condition is not True.
	ReasonNodeNotReady = "NodeNotReady"
	// ReasonNodeClaimed: another QuantumNode, created earlier, names the
	// same Node in spec.nodeName; one Node backs one QuantumNode. The
	// admission rule qn.nodeclaim refuses such a claim, but two creates
	// at the same moment can both pass it.
	ReasonNodeClaimed = "NodeClaimed"

	// ReasonServiceExposed: the Service exposes every declared port.
	ReasonServiceExposed = "ServiceExposed"
	// ReasonServiceMissing: the Service does not exist (yet).
	ReasonServiceMissing = "ServiceMissing"
	// ReasonServiceOutOfDate: the Service exists but not in the declared shape.
	ReasonServiceOutOfDate = "ServiceOutOfDate"
	// ReasonServiceNotOwned: a Service of that name exists and belongs to
	// someone else; the controller never takes over what it did not create.
	ReasonServiceNotOwned = "ServiceNotOwned"
	// ReasonServiceNameInvalid: the QuantumNode's name is a valid object
	// name but not a valid Service name (a DNS-1035 label: at most 63
	// characters, no dots, starting with a letter).
	ReasonServiceNameInvalid = "ServiceNameInvalid"
	// ReasonServicesClash: two entries of spec.services share a name or a
	// port (possible when the admission webhook is not installed).
	ReasonServicesClash = "ServicesClash"

	// ReasonAllChecksPassed: the Node is matched and Ready, the Service exposed.
	ReasonAllChecksPassed = "AllChecksPassed"
)

// NodeLabel is the label that ties a Node to the QuantumNode of that name
// when spec.nodeName is empty.
const NodeLabel = "qn.dev/node"

// Reasons of the PolicyCompliant condition. Part of the API, like the others.
const (
	// ReasonCompliant: the node breaks none of the judged rules.
	ReasonCompliant = "Compliant"
	// ReasonPolicyViolation: at least one deny rule fires for the stored node,
	// or it names a role the role table does not declare.
	ReasonPolicyViolation = "PolicyViolation"
	// ReasonPolicyError: a rule could not be evaluated (timeout, a runtime
	// error in Rego); the node is not known to comply.
	ReasonPolicyError = "PolicyError"
	// ReasonExempt: the role table exempts the node's namespace, so no
	// policy judges it.
	ReasonExempt = "Exempt"
)

// Event reasons besides the condition reasons, which phase-transition
// events reuse.
const (
	// EventServiceCreated: the controller created the QuantumNode's Service.
	EventServiceCreated = "ServiceCreated"
	// EventServiceUpdated: the Service had drifted from spec.services (a
	// spec change, or a hand edit) and was brought back.
	EventServiceUpdated = "ServiceUpdated"
	// EventAmbiguousNode: several Nodes carry the qn.dev/node label of one
	// QuantumNode; the first by name is used.
	EventAmbiguousNode = "AmbiguousNode"
	// EventDuplicateNodeClaim: the QuantumNode claims a Node another,
	// earlier QuantumNode claims (NodeMatched is False, NodeClaimed).
	EventDuplicateNodeClaim = "DuplicateNodeClaim"
)
