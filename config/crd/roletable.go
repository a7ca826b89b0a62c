package crd

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// RoleTableFileName is the name of the QuantumNodeRoleTable manifest inside
// config/crd: the parameters kind of qn-admission's ValidatingAdmissionPolicy.
const RoleTableFileName = "qn.dev_quantumnoderoletables.yaml"

// RoleTableYAML is the QuantumNodeRoleTable CRD manifest exactly as it is on
// disk.
//
//go:embed qn.dev_quantumnoderoletables.yaml
var RoleTableYAML []byte

// RoleTable decodes the embedded manifest into a fresh CRD value, which the
// caller may change.
func RoleTable() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd, err := Decode(RoleTableYAML)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RoleTableFileName, err)
	}
	return crd, nil
}
