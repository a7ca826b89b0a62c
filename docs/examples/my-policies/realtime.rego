# The realtime role: QuantumNodes that serve latency-critical traffic must
# declare a latency budget below the role's maximum and sit in an allowed zone.
package qn.roles.realtime

import data.qn.quantumnode

budget_annotation := "qn.dev/latency-budget-ms"

zone_label := "topology.kubernetes.io/zone"

params := data.roles.realtime

budget := object.get(input.context.annotations, budget_annotation, null)

# The fast path: an admitted request proves itself in one rule and skips
# the detailed denials below.
ok if {
	is_number_string(budget)
	to_number(budget) < params.maxLatencyBudgetMs
	input.context.labels[zone_label] in params.allowedZones
}

deny contains msg if {
	quantumnode.judged
	not ok
	some msg in violation
}

violation contains msg if {
	quantumnode.judged
	budget == null
	msg := sprintf("realtime QuantumNodes must declare annotation %s (a latency budget in milliseconds, below %v)", [budget_annotation, params.maxLatencyBudgetMs])
}

violation contains msg if {
	quantumnode.judged
	budget != null
	not is_number_string(budget)
	msg := sprintf("annotation %s=%q is not a number of milliseconds", [budget_annotation, budget])
}

violation contains msg if {
	quantumnode.judged
	is_number_string(budget)
	to_number(budget) >= params.maxLatencyBudgetMs
	msg := sprintf("latency budget %s ms (annotation %s) is not below the realtime maximum of %v ms", [budget, budget_annotation, params.maxLatencyBudgetMs])
}

violation contains msg if {
	quantumnode.judged
	not input.context.labels[zone_label]
	msg := sprintf("realtime QuantumNodes must carry label %s; allowed zones: %s", [zone_label, concat(", ", params.allowedZones)])
}

violation contains msg if {
	quantumnode.judged
	zone := input.context.labels[zone_label]
	not zone in params.allowedZones
	msg := sprintf("zone %q (label %s) is not allowed for realtime; allowed zones: %s", [zone, zone_label, concat(", ", params.allowedZones)])
}

is_number_string(s) if {
	is_string(s)
	regex.match(`^[0-9]+(\.[0-9]+)?$`, s)
}
