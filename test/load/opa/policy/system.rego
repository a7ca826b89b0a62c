# The webhook answers, shaped as in OPA's Kubernetes admission tutorial:
# system.main (the default decision) wraps the deny set of
# kubernetes.admission in an AdmissionReview; system.mutate wraps its patch
# set in a JSONPatch response.
package system

import data.kubernetes.admission

main := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": response,
}

default uid := ""

uid := input.request.uid

response := {
	"allowed": false,
	"uid": uid,
	"status": {
		"code": 403,
		"reason": "Forbidden",
		"message": reason,
	},
} if {
	reason := concat(", ", admission.deny)
	reason != ""
} else := {
	"allowed": true,
	"uid": uid,
	"warnings": [msg | some msg in admission.warn],
} if {
	count(admission.warn) > 0
} else := {"allowed": true, "uid": uid}

mutate := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": mutate_response,
}

mutate_response := {
	"allowed": true,
	"uid": uid,
	"patchType": "JSONPatch",
	"patch": base64.encode(json.marshal(patches)),
} if {
	patches := [p | some p in admission.patch]
	count(patches) > 0
} else := {"allowed": true, "uid": uid}
