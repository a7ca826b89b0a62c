package admissionpolicy_test

import "testing"

const archPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: arch
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [qn.dev]
      apiVersions: ["*"]
      resources: [quantumnodes]
      operations: [CREATE, UPDATE]
  variables:
  - name: arch
    expression: object.spec.hardware.arch
  validations:
  - expression: variables.arch in ['arm64', 'amd64']
    messageExpression: "'arch ' + variables.arch + ' is not supported'"
  - expression: "!has(object.spec.services) || object.spec.services.all(s, s.port >= 1024)"
    message: services listen on unprivileged ports
    reason: Forbidden
`

func TestSmoke(t *testing.T) {
	pols := read(t, map[string]string{"arch.yaml": archPolicy})
	p := pols["arch"]
	if f := evaluate(p, qnRequest("CREATE", quantumNode("a", nil, "arm64", 8883), nil)); len(f) != 0 {
		t.Errorf("valid: %+v", f)
	}
	f := evaluate(p, qnRequest("CREATE", quantumNode("a", nil, "riscv", 80), nil))
	t.Logf("%+v", f)
	if len(f) != 2 {
		t.Errorf("invalid: %+v", f)
	}
}
