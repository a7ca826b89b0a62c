# The batch role: bulk QuantumNode creation runs at low priority.
package qn.roles.batch

import data.qn.quantumnode

params := data.roles.batch

deny contains msg if {
	quantumnode.judged
	got := object.get(input.context.labels, "priority", null)
	got != params.priority
	msg := sprintf("batch QuantumNodes must carry label priority=%s (found %s)", [params.priority, found(got)])
}

found(null) := "no priority label"

found(v) := sprintf("priority=%s", [v]) if v != null
