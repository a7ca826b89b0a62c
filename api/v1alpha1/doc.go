// Package v1alpha1 holds the QuantumNode API (group qn.dev, version v1alpha1),
// shared by the admission webhook and the qn-controller.
//
// The CustomResourceDefinition in config/crd is the schema the apiserver
// enforces; the kubebuilder markers here describe the same rules so that a
// controller-gen run reproduces it.
//
// +kubebuilder:object:generate=true
// +groupName=qn.dev
package v1alpha1

// Regenerate zz_generated.deepcopy.go and config/crd/qn.dev_quantumnodes.yaml
// after changing the types or their markers. controller-gen runs from the
// module proxy at a pinned version; it is not a dependency of this module.
//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.21.0 object crd paths=./ output:crd:dir=../../config/crd
