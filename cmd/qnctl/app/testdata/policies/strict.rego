package demo.strict

deny contains sprintf("user %q is not an owner of strict nodes", [input.context.user]) if {
	not input.context.user in data.roles.strict.owners
}
