package crd

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ScalerFileName is the name of the HorizontalQNScaler manifest inside
// config/crd.
const ScalerFileName = "qn.dev_horizontalqnscalers.yaml"

// HorizontalQNScalerYAML is the HorizontalQNScaler CRD manifest exactly as
// it is on disk.
//
//go:embed qn.dev_horizontalqnscalers.yaml
var HorizontalQNScalerYAML []byte

// HorizontalQNScaler decodes the embedded manifest into a fresh CRD value,
// which the caller may change.
func HorizontalQNScaler() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd, err := Decode(HorizontalQNScalerYAML)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ScalerFileName, err)
	}
	return crd, nil
}
