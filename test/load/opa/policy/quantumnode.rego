# The QuantumNode rules of qn-admission's bundled policies (roles, their
# operations and parameters, the QuantumNode spec rules, the managed-by
# label), written the way OPA's Kubernetes admission tutorial writes
# policies: one package, one deny rule per violation, parameters inline.
# Rate windows are left out: OPA's server keeps no state between requests.
package kubernetes.admission

roles := {
	"realtime": {"operations": {"CREATE", "UPDATE"}, "allowedZones": {"cn-shanghai"}, "maxLatencyBudgetMs": 50},
	"batch": {"operations": {"CREATE"}, "priority": "low"},
	"default": {"operations": {"CREATE", "UPDATE", "DELETE"}},
}

exempt_namespaces := {"kube-system"}

# The object whose metadata routes the request (oldObject on DELETE).
meta := input.request.object.metadata if input.request.object

meta := input.request.oldObject.metadata if not input.request.object

role := object.get(meta, ["annotations", "qn-role"], "default")

labels := object.get(meta, "labels", {})

annotations := object.get(meta, "annotations", {})

judged if not input.request.namespace in exempt_namespaces

deny contains msg if {
	judged
	not roles[role]
	msg := sprintf("unknown role %q (annotation qn-role); known roles: %s", [role, concat(", ", sort(object.keys(roles)))])
}

deny contains msg if {
	judged
	not input.request.operation in roles[role].operations
	msg := sprintf("role %q may not %s", [role, input.request.operation])
}

quantumnode if {
	judged
	input.request.kind.group == "qn.dev"
	input.request.kind.kind == "QuantumNode"
	input.request.operation in {"CREATE", "UPDATE"}
}

spec := object.get(input.request.object, "spec", {})

services := object.get(spec, "services", [])

deny contains "spec.hardware.arch is required (one of amd64, arm64)" if {
	quantumnode
	not spec.hardware.arch
}

deny contains msg if {
	quantumnode
	arch := spec.hardware.arch
	not arch in {"amd64", "arm64"}
	msg := sprintf("spec.hardware.arch %v is not supported; use one of amd64, arm64", [arch])
}

deny contains "spec.services must list at least one service" if {
	quantumnode
	count(services) == 0
}

deny contains msg if {
	quantumnode
	some i, svc in services
	not regex.match(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, svc.name)
	msg := sprintf("spec.services[%d].name %v is not a DNS label", [i, svc.name])
}

deny contains msg if {
	quantumnode
	some i, svc in services
	count(svc.name) > 63
	msg := sprintf("spec.services[%d].name is longer than 63 characters", [i])
}

deny contains msg if {
	quantumnode
	some i, svc in services
	not valid_port(svc.port)
	msg := sprintf("spec.services[%d].port %v is out of range: use a whole number from 1 to 65535", [i, svc.port])
}

deny contains msg if {
	quantumnode
	some i, j
	services[i].name == services[j].name
	i < j
	msg := sprintf("service name %v is declared more than once (spec.services[%d], spec.services[%d])", [services[i].name, i, j])
}

deny contains msg if {
	quantumnode
	some i, j
	services[i].port == services[j].port
	i < j
	msg := sprintf("port %v is declared more than once (spec.services[%d], spec.services[%d])", [services[i].port, i, j])
}

deny contains msg if {
	quantumnode
	input.request.operation == "UPDATE"
	old := input.request.oldObject.spec.hardware.arch
	new := spec.hardware.arch
	old != new
	msg := sprintf("spec.hardware.arch is immutable: this QuantumNode was created as %v and cannot become %v", [old, new])
}

warn contains msg if {
	quantumnode
	some i, svc in services
	valid_port(svc.port)
	svc.port < 1024
	msg := sprintf("spec.services[%d] (%v) uses privileged port %d", [i, svc.name, svc.port])
}

valid_port(p) if {
	is_number(p)
	p == floor(p)
	p >= 1
	p <= 65535
}

# realtime: a latency budget below the maximum, in an allowed zone.
deny contains msg if {
	quantumnode
	role == "realtime"
	not annotations["qn.dev/latency-budget-ms"]
	msg := "realtime QuantumNodes must declare annotation qn.dev/latency-budget-ms"
}

deny contains msg if {
	quantumnode
	role == "realtime"
	budget := annotations["qn.dev/latency-budget-ms"]
	not regex.match(`^[0-9]+(\.[0-9]+)?$`, budget)
	msg := sprintf("annotation qn.dev/latency-budget-ms=%q is not a number of milliseconds", [budget])
}

deny contains msg if {
	quantumnode
	role == "realtime"
	budget := annotations["qn.dev/latency-budget-ms"]
	regex.match(`^[0-9]+(\.[0-9]+)?$`, budget)
	to_number(budget) >= roles.realtime.maxLatencyBudgetMs
	msg := sprintf("latency budget %s ms is not below the realtime maximum of %v ms", [budget, roles.realtime.maxLatencyBudgetMs])
}

deny contains msg if {
	quantumnode
	role == "realtime"
	zone := object.get(labels, "topology.kubernetes.io/zone", "")
	not zone in roles.realtime.allowedZones
	msg := sprintf("zone %q (label topology.kubernetes.io/zone) is not allowed for realtime", [zone])
}

# batch: low priority only.
deny contains msg if {
	quantumnode
	role == "batch"
	object.get(labels, "priority", "") != roles.batch.priority
	msg := sprintf("batch QuantumNodes must carry label priority=%s", [roles.batch.priority])
}

# Mutation: every QuantumNode written carries qn.dev/managed-by.
patch contains {"op": "add", "path": "/metadata/labels", "value": {"qn.dev/managed-by": "qn-admission"}} if {
	quantumnode
	not input.request.object.metadata.labels
}

patch contains {"op": "add", "path": "/metadata/labels/qn.dev~1managed-by", "value": "qn-admission"} if {
	quantumnode
	input.request.object.metadata.labels
	not input.request.object.metadata.labels["qn.dev/managed-by"]
}
