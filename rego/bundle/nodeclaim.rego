# Bundled, and off until you turn it on: it needs the cluster inventory,
# which the chart leaves off (webhook.inventory.enabled). To turn it on,
# declare the inventory in roles.yaml and list qn.nodeclaim in the roles
# it should judge:
#
#   inventory:
#     - {apiVersion: qn.dev/v1alpha1, kind: QuantumNode}
#     - {apiVersion: v1, kind: Node}
#   roles:
#     default:
#       packages: [qn.quantumnode, qn.nodeclaim, qn.window, qn.mutate.managedby]
#
# and install the chart with webhook.inventory.enabled=true and
# webhook.inventory.resources naming nodes and quantumnodes (docs/policies.md,
# "Policies that see the cluster"). Without an inventory these rules say
# nothing.
#
# qnctl lint-ignore: unlisted
#
# One Node backs one QuantumNode. These rules read the cluster inventory
# (data.inventory, the stored QuantumNodes and Nodes qn-webhook watches,
# declared under inventory: in roles.yaml): a QuantumNode may not claim
# (spec.nodeName) a Node another QuantumNode claims, and naming a Node that
# does not exist is a warning. Admission is not atomic: two creates at the
# same moment can both pass, so qn-controller reports the later claim
# (NodeMatched False, reason NodeClaimed, and an event).
package qn.nodeclaim

import data.qn.quantumnode

node := object.get(input.request, ["object", "spec", "nodeName"], "")

# The request's own name: on CREATE with generateName it is empty, and no
# stored QuantumNode is this one.
self_namespace := object.get(input.request, "namespace", "")

self_name := object.get(input.request, "name", "")

# claims maps each Node that stored QuantumNodes claim to them, as
# namespace/name. It reads the inventory and nothing of the request, so
# qn-webhook computes it once per published inventory, not per request
# (docs/policies.md, "Policies that see the cluster"): write such an index
# instead of scanning the inventory in a rule that reads input.
claims[claimed] contains sprintf("%s/%s", [ns, name]) if {
	some ns, name
	claimed := data.inventory.namespace[ns]["qn.dev/v1alpha1"].QuantumNode[name].spec.nodeName
}

# claimants are the other stored QuantumNodes naming the same Node.
claimants contains other if {
	node != ""
	some other in claims[node]
	other != sprintf("%s/%s", [self_namespace, self_name])
}

deny contains msg if {
	quantumnode.judged
	some other in claimants
	msg := sprintf("spec.nodeName %q is already claimed by QuantumNode %s; a Node backs one QuantumNode (pick another Node, or free it first)", [node, other])
}

# A Node that does not exist is a warning, not a denial: Nodes register
# after the objects that name them. It needs an inventory that holds Nodes
# (data.inventory.cluster.v1.Node is {} when it holds none, undefined when
# there is no inventory, as in qnctl without --inventory). The tests of
# existence read no field of the Nodes, so the inventory keeps only their
# names.
warn contains msg if {
	quantumnode.judged
	node != ""
	data.inventory.cluster.v1.Node
	not data.inventory.cluster.v1.Node[node]
	msg := sprintf("spec.nodeName %q names no Node in the cluster (yet); the QuantumNode stays Pending until that Node registers", [node])
}
