package example.services

# "servcies": undefined in every request, so this rule never fires.
deny contains "a QuantumNode needs at least one service" if {
	input.request.operation == "CREATE"
	count(input.request.object.spec.servcies) == 0
}
