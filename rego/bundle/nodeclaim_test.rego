package qn.nodeclaim_test

import data.qn.nodeclaim

review(op, ns, name, node) := {"request": {
	"kind": {"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
	"operation": op,
	"namespace": ns,
	"name": name,
	"object": {
		"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
		"metadata": {"name": name, "namespace": ns},
		"spec": {"nodeName": node, "hardware": {"arch": "arm64"}, "services": [{"name": "mqtt", "port": 8883}]},
	},
}}

inventory := {
	"cluster": {"v1": {"Node": {"worker-1": {"metadata": {"name": "worker-1"}}, "worker-2": {"metadata": {"name": "worker-2"}}}}},
	"namespace": {"edge": {"qn.dev/v1alpha1": {"QuantumNode": {"edge-1": {"metadata": {"name": "edge-1", "namespace": "edge"}, "spec": {"nodeName": "worker-1"}}}}}},
}

test_a_claimed_node_is_denied_naming_the_claimant if {
	nodeclaim.deny[`spec.nodeName "worker-1" is already claimed by QuantumNode edge/edge-1; a Node backs one QuantumNode (pick another Node, or free it first)`] with input as review("CREATE", "lab", "lab-1", "worker-1")
		with data.inventory as inventory
}

test_a_free_node_is_admitted if {
	count(nodeclaim.deny) == 0 with input as review("CREATE", "lab", "lab-1", "worker-2") with data.inventory as inventory
	count(nodeclaim.warn) == 0 with input as review("CREATE", "lab", "lab-1", "worker-2") with data.inventory as inventory
}

test_an_update_of_the_claimant_itself_is_admitted if {
	count(nodeclaim.deny) == 0 with input as review("UPDATE", "edge", "edge-1", "worker-1") with data.inventory as inventory
}

test_a_missing_node_is_a_warning if {
	count(nodeclaim.deny) == 0 with input as review("CREATE", "lab", "lab-1", "worker-9") with data.inventory as inventory
	nodeclaim.warn[`spec.nodeName "worker-9" names no Node in the cluster (yet); the QuantumNode stays Pending until that Node registers`] with input as review("CREATE", "lab", "lab-1", "worker-9")
		with data.inventory as inventory
}

test_without_an_inventory_nothing_is_said if {
	count(nodeclaim.deny) == 0 with input as review("CREATE", "lab", "lab-1", "worker-1")
	count(nodeclaim.warn) == 0 with input as review("CREATE", "lab", "lab-1", "worker-1")
}

test_an_inventory_without_nodes_claims_only if {
	inv := {"cluster": {"v1": {"Node": {}}}, "namespace": {}}
	nodeclaim.warn[_] with input as review("CREATE", "lab", "lab-1", "worker-1") with data.inventory as inv
	count(nodeclaim.deny) == 0 with input as review("CREATE", "lab", "lab-1", "worker-1") with data.inventory as inv
}

test_no_node_name_reads_nothing if {
	count(nodeclaim.deny) == 0 with input as review("CREATE", "lab", "lab-1", "") with data.inventory as inventory
	count(nodeclaim.warn) == 0 with input as review("CREATE", "lab", "lab-1", "") with data.inventory as inventory
}
