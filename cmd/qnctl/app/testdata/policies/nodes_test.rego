package demo.nodes_test

import data.demo.nodes

test_empty_services_are_denied if {
	nodes.deny["spec.services must not be empty"] with input as {"request": {"operation": "CREATE", "object": {"spec": {"hardware": {"arch": "amd64"}}}}}
}

test_valid_spec_is_admitted if {
	count(nodes.deny) == 0 with input as {"request": {"operation": "CREATE", "object": {"spec": {"hardware": {"arch": "amd64"}, "services": [{"name": "a", "port": 8080}]}}}}
}
