package demo.ports

deny contains sprintf("service %s uses privileged port %d", [s.name, s.port]) if {
	some s in input.request.object.spec.services
	s.port < 1024
}
