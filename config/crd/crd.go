// Package crd embeds the CustomResourceDefinitions of qn.dev (QuantumNode,
// QuantumNodeHealthPolicy, HorizontalQNScaler, QuantumNodeRoleTable), the
// one copy that tests, the Helm chart and the
// docs use.
package crd

import (
	_ "embed"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// FileName is the name of the embedded manifest inside config/crd.
const FileName = "qn.dev_quantumnodes.yaml"

// QuantumNodeYAML is the QuantumNode CRD manifest exactly as it is on disk.
//
//go:embed qn.dev_quantumnodes.yaml
var QuantumNodeYAML []byte

// HealthPolicyFileName is the QuantumNodeHealthPolicy manifest inside config/crd.
const HealthPolicyFileName = "qn.dev_quantumnodehealthpolicies.yaml"

// HealthPolicyYAML is the QuantumNodeHealthPolicy CRD manifest as on disk.
//
//go:embed qn.dev_quantumnodehealthpolicies.yaml
var HealthPolicyYAML []byte

// HealthPolicy decodes the embedded QuantumNodeHealthPolicy manifest into a
// fresh CRD value.
func HealthPolicy() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd, err := Decode(HealthPolicyYAML)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", HealthPolicyFileName, err)
	}
	return crd, nil
}

// Manifest is one embedded CRD manifest and its file name.
type Manifest struct {
	FileName string
	YAML     []byte
}

// Manifests are the CRDs the chart's crds/ holds, in file-name order:
// what qn-controller needs before it starts.
func Manifests() []Manifest {
	return []Manifest{
		{FileName: ScalerFileName, YAML: HorizontalQNScalerYAML},
		{FileName: HealthPolicyFileName, YAML: HealthPolicyYAML},
		{FileName: RoleTableFileName, YAML: RoleTableYAML},
		{FileName: FileName, YAML: QuantumNodeYAML},
	}
}

// All decodes every qn.dev CRD, for tests that install them.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, m := range Manifests() {
		crd, err := Decode(m.YAML)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.FileName, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// QuantumNode decodes the embedded manifest into a fresh CRD value, which
// the caller may change.
func QuantumNode() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd, err := Decode(QuantumNodeYAML)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", FileName, err)
	}
	return crd, nil
}

// Decode reads one CustomResourceDefinition manifest, YAML or JSON. Decoding
// is strict: an unknown or duplicated field is an error, so a typo in the
// manifest fails here instead of being silently dropped.
func Decode(manifest []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(manifest, crd); err != nil {
		return nil, fmt.Errorf("decode CustomResourceDefinition: %w", err)
	}
	// Strict decoding still accepts any kind: say so when it is not a CRD.
	if gvk := crd.GroupVersionKind(); gvk != apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition") {
		return nil, fmt.Errorf("decode CustomResourceDefinition: the manifest is apiVersion %q kind %q", crd.APIVersion, crd.Kind)
	}
	return crd, nil
}

// OpenAPIV3Schema is the openAPIV3Schema of the CRD's version in its JSON
// form, for tools that read JSON schemas (qnctl lint's type check).
func OpenAPIV3Schema(def *apiextensionsv1.CustomResourceDefinition, version string) (map[string]any, error) {
	for _, v := range def.Spec.Versions {
		if v.Name != version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		js, err := json.Marshal(v.Schema.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("%s version %s: %w", def.Name, version, err)
		}
		var schema map[string]any
		if err := json.Unmarshal(js, &schema); err != nil {
			return nil, fmt.Errorf("%s version %s: %w", def.Name, version, err)
		}
		return schema, nil
	}
	return nil, fmt.Errorf("%s has no version %s with an OpenAPI v3 schema", def.Name, version)
}
