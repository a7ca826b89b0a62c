package qn.quantumnode_test

import data.qn.mutate.managedby
import data.qn.quantumnode

review(op, obj) := {"request": {
	"kind": {"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
	"operation": op,
	"object": obj,
}}

node(spec) := {"apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode", "metadata": {"name": "edge-1"}, "spec": spec}

good_spec := {"hardware": {"arch": "arm64"}, "services": [{"name": "mqtt", "port": 8883}, {"name": "metrics", "port": 9100}]}

test_valid_node_is_admitted if {
	count(quantumnode.deny) == 0 with input as review("CREATE", node(good_spec))
	count(quantumnode.warn) == 0 with input as review("CREATE", node(good_spec))
}

test_missing_arch_is_denied if {
	quantumnode.deny["spec.hardware.arch is required (one of amd64, arm64)"] with input as review("CREATE", node({"services": good_spec.services}))
}

test_unknown_arch_is_denied if {
	quantumnode.deny[`spec.hardware.arch "riscv" is not supported; use one of amd64, arm64`] with input as review("CREATE", node({"hardware": {"arch": "riscv"}, "services": good_spec.services}))
}

test_empty_services_are_denied if {
	quantumnode.deny["spec.services must list at least one service"] with input as review("CREATE", node({"hardware": {"arch": "amd64"}, "services": []}))
	quantumnode.deny["spec.services must list at least one service"] with input as review("CREATE", node({"hardware": {"arch": "amd64"}}))
	quantumnode.deny["spec.services must list at least one service"] with input as review("CREATE", node({"hardware": {"arch": "amd64"}, "services": {"name": "x"}}))
}

test_duplicate_service_names_are_denied if {
	spec := {"hardware": {"arch": "amd64"}, "services": [{"name": "web", "port": 80}, {"name": "api", "port": 81}, {"name": "web", "port": 82}]}
	quantumnode.deny[`service name "web" is declared 2 times (spec.services[0], spec.services[2]); service names must be unique`] with input as review("CREATE", node(spec))
}

test_duplicate_ports_are_denied if {
	spec := {"hardware": {"arch": "amd64"}, "services": [{"name": "web", "port": 8080}, {"name": "api", "port": 8080}]}
	quantumnode.deny["port 8080 is declared 2 times (spec.services[0], spec.services[1]); each service needs its own port"] with input as review("CREATE", node(spec))
}

test_duplicates_list_every_place_in_every_shape if {
	spec := {"hardware": {"arch": "amd64"}, "services": [
		{"name": "web", "port": 8080}, {"name": "web", "port": 8080}, {"name": "api", "port": 81},
		{"name": "web", "port": 8080}, {"name": "db", "port": 81},
	]}
	denials := quantumnode.deny with input as review("CREATE", node(spec))
	denials == {
		`service name "web" is declared 3 times (spec.services[0], spec.services[1], spec.services[3]); service names must be unique`,
		"port 8080 is declared 3 times (spec.services[0], spec.services[1], spec.services[3]); each service needs its own port",
		"port 81 is declared 2 times (spec.services[2], spec.services[4]); each service needs its own port",
	}
}

# Past ten clashes of a field the rest are counted, not spelled out: an
# answer is clipped to 4 KiB anyway.
test_clashes_past_ten_are_counted if {
	svcs := [{"name": sprintf("s%d", [i % 12]), "port": 1000 + i} | some i in numbers.range(0, 23)]
	denials := quantumnode.deny with input as review("CREATE", node({"hardware": {"arch": "amd64"}, "services": svcs}))
	count([m | some m in denials; startswith(m, "service name ")]) == 10
	denials["2 more service names are declared more than once; the first 10 are listed"]
	count(denials) == 11
}

# A structure where a scalar belongs is named by its type, never repeated:
# it may carry a secret, or megabytes.
test_non_scalar_values_are_named_not_quoted if {
	secret := {"password": "hunter2"}
	spec := {"hardware": {"arch": secret}, "services": [{"name": secret, "port": [8080]}, ["x"]]}
	denials := quantumnode.deny with input as review("CREATE", node(spec))
	denials["spec.hardware.arch (an object) is not supported; use one of amd64, arm64"]
	denials["spec.services[0].name (an object) is not a DNS label: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"]
	denials["spec.services[0].port (an array) is out of range: use a whole number from 1 to 65535"]
	denials["spec.services[1] must be an object with name and port, got (an array)"]
	every msg in denials {
		not contains(msg, "hunter2")
	}
}

test_bad_service_name_is_denied if {
	spec := {"hardware": {"arch": "amd64"}, "services": [{"name": "Web_1", "port": 8080}]}
	quantumnode.deny[`spec.services[0].name "Web_1" is not a DNS label: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit`] with input as review("CREATE", node(spec))
}

test_long_service_name_is_denied if {
	name := concat("", ["a" | some _ in numbers.range(1, 64)])
	spec := {"hardware": {"arch": "amd64"}, "services": [{"name": name, "port": 8080}]}
	count(quantumnode.deny) == 1 with input as review("CREATE", node(spec))
}

test_ports_out_of_range_are_denied if {
	every port in [0, 65536, -1, 80.5, "80"] {
		spec := {"hardware": {"arch": "amd64"}, "services": [{"name": "web", "port": port}]}
		msg := sprintf("spec.services[0].port %s is out of range: use a whole number from 1 to 65535", [json.marshal(port)])
		quantumnode.deny[msg] with input as review("CREATE", node(spec))
	}
}

test_missing_service_fields_are_denied if {
	spec := {"hardware": {"arch": "amd64"}, "services": [{}, 7]}
	d := quantumnode.deny with input as review("CREATE", node(spec))
	d["spec.services[0].name is required"]
	d["spec.services[0].port is required (1-65535)"]
	d["spec.services[1] must be an object with name and port, got 7"]
}

test_arch_is_immutable_on_update if {
	old := node(good_spec)
	new := node(object.union(good_spec, {"hardware": {"arch": "amd64"}}))
	r := object.union(review("UPDATE", new), {"request": {"oldObject": old}})
	quantumnode.deny[`spec.hardware.arch is immutable: this QuantumNode was created as "arm64" and cannot become "amd64"; delete and recreate it for new hardware`] with input as r
}

test_update_keeping_arch_is_admitted if {
	r := object.union(review("UPDATE", node(good_spec)), {"request": {"oldObject": node(good_spec)}})
	count(quantumnode.deny) == 0 with input as r
}

test_privileged_port_warns if {
	spec := {"hardware": {"arch": "amd64"}, "services": [{"name": "http", "port": 80}]}
	quantumnode.warn["spec.services[0] (http) uses privileged port 80: the edge node must allow binding ports below 1024"] with input as review("CREATE", node(spec))
}

test_delete_and_other_kinds_are_not_judged if {
	count(quantumnode.deny) == 0 with input as review("DELETE", node({}))
	other := {"request": {"kind": {"group": "", "version": "v1", "kind": "ConfigMap"}, "operation": "CREATE", "object": {}}}
	count(quantumnode.deny) == 0 with input as other
}

test_managed_by_label_added_when_absent if {
	managedby.patch == {{"op": "add", "path": "/metadata/labels/qn.dev~1managed-by", "value": "qn-admission"}} with input as review("CREATE", node(good_spec))
}

test_managed_by_label_left_alone_when_present if {
	obj := object.union(node(good_spec), {"metadata": {"labels": {"qn.dev/managed-by": "someone-else"}}})
	count(managedby.patch) == 0 with input as review("CREATE", obj)
}

# The fast path must agree with the detailed rules, or an invalid object
# could be admitted: valid holds exactly when no violation does.
agreement_specs := [
	good_spec,
	{"hardware": {"arch": "riscv"}, "services": good_spec.services},
	{"services": good_spec.services},
	{"hardware": {"arch": "amd64"}, "services": []},
	{"hardware": {"arch": "amd64"}},
	{"hardware": {"arch": "amd64"}, "services": {"name": "x"}},
	{"hardware": {"arch": "amd64"}, "services": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]},
	{"hardware": {"arch": "amd64"}, "services": [{"name": "a", "port": 1}, {"name": "b", "port": 1}]},
	{"hardware": {"arch": "amd64"}, "services": [{"name": "Bad_Name", "port": 1}]},
	{"hardware": {"arch": "amd64"}, "services": [{"name": "a", "port": 0}]},
	{"hardware": {"arch": "amd64"}, "services": [{"name": "a", "port": 70000}]},
	{"hardware": {"arch": "amd64"}, "services": [{"name": "a", "port": "80"}]},
	{"hardware": {"arch": "amd64"}, "services": [{"name": "a", "port": 80.5}]},
	{"hardware": {"arch": "amd64"}, "services": [{"name": "a"}]},
	{"hardware": {"arch": "amd64"}, "services": [{"port": 80}]},
	{"hardware": {"arch": "amd64"}, "services": [7]},
	{"hardware": {"arch": 7}, "services": good_spec.services},
	{"hardware": "arm64", "services": good_spec.services},
]

test_valid_agrees_with_violations if {
	every spec in agreement_specs {
		r := review("CREATE", node(spec))
		ok := is_valid with input as r
		bad := quantumnode.violation with input as r
		(count(bad) == 0) == ok
	}
}

is_valid := true if quantumnode.valid else := false

test_valid_agrees_with_violations_on_update if {
	every arch in ["arm64", "amd64"] {
		r := object.union(review("UPDATE", node(object.union(good_spec, {"hardware": {"arch": arch}}))), {"request": {"oldObject": node(good_spec)}})
		ok := is_valid with input as r
		bad := quantumnode.violation with input as r
		(count(bad) == 0) == ok
	}
}
