package demo.nodes

judged if input.request.operation in {"CREATE", "UPDATE"}

spec := object.get(input.request, ["object", "spec"], {})

deny contains msg if {
	judged
	not valid
	some msg in violation
}

valid if {
	spec.hardware.arch in {"amd64", "arm64"}
	count(object.get(spec, "services", [])) > 0
}

violation contains "spec.hardware.arch must be amd64 or arm64" if {
	not spec.hardware.arch in {"amd64", "arm64"}
}

violation contains "spec.services must not be empty" if {
	count(object.get(spec, "services", [])) == 0
}

warn contains sprintf("service %s uses privileged port %d", [svc.name, svc.port]) if {
	judged
	some svc in object.get(spec, "services", [])
	svc.port < 1024
}
