# Edge firewalls close port 22: a QuantumNode must not declare SSH.
package qn.ssh

import data.qn.quantumnode

deny contains msg if {
	quantumnode.judged
	some i, svc in quantumnode.services
	svc.port == 22
	msg := sprintf("spec.services[%d] (%v) uses port 22: SSH is closed on edge nodes", [i, svc.name])
}
