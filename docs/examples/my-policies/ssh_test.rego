package qn.ssh_test

import data.qn.ssh

test_port_22_is_denied if {
	count(ssh.deny) == 1 with input as {"request": {
		"kind": {"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"},
		"operation": "CREATE",
		"object": {"spec": {"services": [{"name": "ssh", "port": 22}]}},
	}}
}
