package qn.roles_test

import data.qn.roles.batch
import data.qn.roles.realtime
import data.qn.window

node_input(op, labels, annotations) := {
	"request": {
		"kind": {"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
		"operation": op,
		"object": {"metadata": {"labels": labels, "annotations": annotations}, "spec": {}},
	},
	"context": {"labels": labels, "annotations": annotations, "role": "realtime"},
}

rt_ok := node_input("CREATE", {"topology.kubernetes.io/zone": "cn-shanghai"}, {"qn.dev/latency-budget-ms": "20"})

test_realtime_admits_a_fast_node_in_shanghai if {
	count(realtime.deny) == 0 with input as rt_ok
}

test_realtime_requires_a_budget if {
	realtime.deny["realtime QuantumNodes must declare annotation qn.dev/latency-budget-ms (a latency budget in milliseconds, below 50)"] with input as node_input("CREATE", {"topology.kubernetes.io/zone": "cn-shanghai"}, {})
}

test_realtime_budget_must_be_below_50 if {
	realtime.deny["latency budget 50 ms (annotation qn.dev/latency-budget-ms) is not below the realtime maximum of 50 ms"] with input as node_input("UPDATE", {"topology.kubernetes.io/zone": "cn-shanghai"}, {"qn.dev/latency-budget-ms": "50"})
	count(realtime.deny) == 0 with input as node_input("UPDATE", {"topology.kubernetes.io/zone": "cn-shanghai"}, {"qn.dev/latency-budget-ms": "49.5"})
}

test_realtime_budget_must_be_a_number if {
	realtime.deny[`annotation qn.dev/latency-budget-ms="fast" is not a number of milliseconds`] with input as node_input("CREATE", {"topology.kubernetes.io/zone": "cn-shanghai"}, {"qn.dev/latency-budget-ms": "fast"})
}

test_realtime_zone_must_be_allowed if {
	realtime.deny[`zone "eu-west-1" (label topology.kubernetes.io/zone) is not allowed for realtime; allowed zones: cn-shanghai`] with input as node_input("CREATE", {"topology.kubernetes.io/zone": "eu-west-1"}, {"qn.dev/latency-budget-ms": "10"})
	realtime.deny["realtime QuantumNodes must carry label topology.kubernetes.io/zone; allowed zones: cn-shanghai"] with input as node_input("CREATE", {}, {"qn.dev/latency-budget-ms": "10"})
}

test_realtime_zones_come_from_role_parameters if {
	count(realtime.deny) == 0 with input as node_input("CREATE", {"topology.kubernetes.io/zone": "eu-west-1"}, {"qn.dev/latency-budget-ms": "10"})
		with data.roles.realtime.allowedZones as ["eu-west-1"]
}

test_batch_requires_low_priority if {
	count(batch.deny) == 0 with input as node_input("CREATE", {"priority": "low"}, {})
	batch.deny["batch QuantumNodes must carry label priority=low (found priority=high)"] with input as node_input("CREATE", {"priority": "high"}, {})
	batch.deny["batch QuantumNodes must carry label priority=low (found no priority label)"] with input as node_input("CREATE", {}, {})
}

test_window_warns_from_90_percent if {
	ctx := {"role": "realtime", "window": {"key": "user", "count": 106, "limit": 120, "periodSeconds": 60, "remaining": 14}}
	count(window.warn) == 0 with input as {"context": ctx}
	near := object.union(ctx, {"window": {"count": 108}})
	window.warn[`rate window: this is change 109 of 120 allowed per 60s for role "realtime" (user window); slow down to avoid 429`] with input as {"context": near}
}

test_window_is_silent_without_a_window if {
	count(window.warn) == 0 with input as {"context": {"role": "default"}}
}

is_ok := true if realtime.ok else := false

test_realtime_ok_agrees_with_violations if {
	every labels in [{}, {"topology.kubernetes.io/zone": "cn-shanghai"}, {"topology.kubernetes.io/zone": "eu-west-1"}] {
		every annotations in [{}, {"qn.dev/latency-budget-ms": "20"}, {"qn.dev/latency-budget-ms": "50"}, {"qn.dev/latency-budget-ms": "fast"}, {"qn.dev/latency-budget-ms": "49.9"}] {
			r := node_input("CREATE", labels, annotations)
			ok := is_ok with input as r
			bad := realtime.violation with input as r
			(count(bad) == 0) == ok
		}
	}
}
