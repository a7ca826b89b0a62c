# QuantumNode rules. The CRD makes every one of these checks itself (its
# OpenAPI schema, and x-kubernetes-validations for unique service names,
# unique ports and the immutable architecture), before any webhook is
# called; they are repeated here so that a request that bypassed them (an
# old CRD, a schema-less install) is still judged, and so that qnctl and the
# background audit judge stored objects by the same rules.
package qn.quantumnode

is_quantumnode if {
	input.request.kind.group == "qn.dev"
	input.request.kind.kind == "QuantumNode"
}

# Only writes that carry an object are judged; DELETE and CONNECT are not.
judged if {
	is_quantumnode
	input.request.operation in {"CREATE", "UPDATE"}
}

spec := object.get(input.request, ["object", "spec"], {})

arches := {"arm64", "amd64"}

# services is [] when absent or not an array, so the rules below never fail
# on a crafted shape; "services_missing" reports the shape problem instead.
services := s if {
	s := object.get(spec, "services", [])
	is_array(s)
} else := []

# The fast path: one pass that proves the object valid. An admitted request
# evaluates `valid` and the one deny rule; only a request that will be
# denied evaluates the detailed `violation` rules for their messages. The
# test test_valid_agrees_with_violations keeps the two in step: valid holds
# exactly when no violation does.
valid if {
	object.get(spec, ["hardware", "arch"], null) in arches
	count(services) > 0
	every svc in services {
		dns_label(svc.name)
		valid_port(svc.port)
	}
	count({s.name | some s in services}) == count(services)
	count({s.port | some s in services}) == count(services)
	not arch_changed
}

invalid if {
	judged
	not valid
}

deny contains msg if {
	invalid
	some msg in violation
}

arch_changed if {
	input.request.operation == "UPDATE"
	old := object.get(input.request, ["oldObject", "spec", "hardware", "arch"], null)
	old != null
	old != object.get(spec, ["hardware", "arch"], null)
}

violation contains "spec.hardware.arch is required (one of amd64, arm64)" if {
	judged
	object.get(spec, ["hardware", "arch"], null) == null
}

violation contains msg if {
	judged
	arch := object.get(spec, ["hardware", "arch"], null)
	arch != null
	not arch in arches
	msg := sprintf("spec.hardware.arch %s is not supported; use one of amd64, arm64", [shown(arch)])
}

violation contains "spec.services must list at least one service" if {
	judged
	count(services) == 0
}

violation contains msg if {
	judged
	some i, svc in services
	not is_object(svc)
	msg := sprintf("spec.services[%d] must be an object with name and port, got %s", [i, shown(svc)])
}

violation contains msg if {
	judged
	some i, svc in services
	is_object(svc)
	not svc.name
	msg := sprintf("spec.services[%d].name is required", [i])
}

violation contains msg if {
	judged
	some i, svc in services
	name := svc.name
	not dns_label(name)
	msg := sprintf("spec.services[%d].name %s is not a DNS label: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit", [i, shown(name)])
}

violation contains msg if {
	judged
	some i, svc in services
	is_object(svc)
	not svc.port
	msg := sprintf("spec.services[%d].port is required (1-65535)", [i])
}

violation contains msg if {
	judged
	some i, svc in services
	port := svc.port
	not valid_port(port)
	msg := sprintf("spec.services[%d].port %s is out of range: use a whole number from 1 to 65535", [i, shown(port)])
}

violation contains msg if {
	judged
	some k, [start, end] in name_runs
	k < listed_clashes
	msg := sprintf("service name %s is declared %d times (%s); service names must be unique", [shown(name_pairs[start][0]), end - start, places(name_pairs, start, end)])
}

violation contains msg if {
	judged
	count(name_runs) > listed_clashes
	msg := sprintf("%d more service names are declared more than once; the first %d are listed", [count(name_runs) - listed_clashes, listed_clashes])
}

violation contains msg if {
	judged
	some k, [start, end] in port_runs
	k < listed_clashes
	msg := sprintf("port %s is declared %d times (%s); each service needs its own port", [shown(port_pairs[start][0]), end - start, places(port_pairs, start, end)])
}

violation contains msg if {
	judged
	count(port_runs) > listed_clashes
	msg := sprintf("%d more ports are declared more than once; the first %d are listed", [count(port_runs) - listed_clashes, listed_clashes])
}

# The duplicate rules sort the (value, index) pairs of a field once, so
# equal values sit side by side, and find the runs of equal values in one
# pass: n log n in every shape. (A scan of the services per distinct value
# would be n squared: the planned evaluator has no comprehension index.)
# Only the first listed_clashes clashes of a field are spelled out, since
# an answer is clipped to 4 KiB anyway; the rest are counted.
# TestDuplicateRulesStayLinear in rego/ holds both evaluators to it.
listed_clashes := 10

name_pairs := sort([[s.name, i] | some i, s in services])

port_pairs := sort([[s.port, i] | some i, s in services])

name_runs := runs(name_pairs)

port_runs := runs(port_pairs)

# runs(pairs) lists [start, end) of each run of two or more equal values.
runs(pairs) := [[start, end] |
	some j, start in starts
	end := run_end(starts, j, count(pairs))
	end - start > 1
] if {
	starts := [k | some k, _ in pairs; run_starts(pairs, k)]
}

run_starts(_, 0)

run_starts(pairs, k) if {
	k > 0
	pairs[k][0] != pairs[k - 1][0]
}

# run_end is where the run that starts at starts[j] ends (exclusive).
run_end(starts, j, _) := starts[j + 1] if j + 1 < count(starts)

run_end(starts, j, n) := n if j + 1 == count(starts)

# places names the services of one run, in index order.
places(pairs, start, end) := concat(", ", [sprintf("spec.services[%d]", [pairs[m][1]]) | some m in numbers.range(start, end - 1)])

# The architecture is a fact about the hardware: changing it on an existing
# QuantumNode would silently retarget workloads. Judged against oldObject.
violation contains msg if {
	judged
	arch_changed
	old := object.get(input.request, ["oldObject", "spec", "hardware", "arch"], null)
	new := object.get(spec, ["hardware", "arch"], null)
	msg := sprintf("spec.hardware.arch is immutable: this QuantumNode was created as %s and cannot become %s; delete and recreate it for new hardware", [shown(old), shown(new)])
}

warn contains msg if {
	judged
	some i, svc in services
	valid_port(svc.port)
	svc.port < 1024
	msg := sprintf("spec.services[%d] (%s) uses privileged port %d: the edge node must allow binding ports below 1024", [i, shown_name(svc), svc.port])
}

# shown(v) quotes a value of the object in a message: a scalar as JSON, and
# anything else by its type only, so a message never repeats a structure a
# caller put where a scalar belongs (it may hold a secret, or megabytes).
shown(v) := json.marshal(v) if {
	not is_object(v)
	not is_array(v)
	not is_set(v)
}

shown(v) := "(an object)" if is_object(v)

shown(v) := "(an array)" if is_array(v)

shown(v) := "(a set)" if is_set(v)

# shown_name is a service's name for a message: a valid name as it is,
# another value as shown, a missing one by its absence.
shown_name(svc) := svc.name if dns_label(svc.name)

shown_name(svc) := shown(svc.name) if {
	svc.name
	not dns_label(svc.name)
}

shown_name(svc) := "no name" if not svc.name

dns_label(name) if {
	is_string(name)
	count(name) <= 63
	regex.match(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, name)
}

valid_port(p) if {
	is_number(p)
	p == floor(p)
	p >= 1
	p <= 65535
}
