# Mutation: every QuantumNode carries qn.dev/managed-by=qn-admission, so
# operators can select what this webhook governs. An existing value is left
# alone (the label is added only when absent).
package qn.mutate.managedby

patch contains {"op": "add", "path": "/metadata/labels/qn.dev~1managed-by", "value": "qn-admission"} if {
	input.request.kind.group == "qn.dev"
	input.request.kind.kind == "QuantumNode"
	input.request.operation in {"CREATE", "UPDATE"}
	not has_label
}

has_label if input.request.object.metadata.labels["qn.dev/managed-by"]
