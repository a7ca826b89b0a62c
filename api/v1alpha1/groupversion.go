package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Names of the API group, version, kind and resource.
const (
	// Group is the API group of QuantumNode.
	Group = "qn.dev"
	// Version is the API version this package implements.
	Version = "v1alpha1"
	// Kind is the kind of a single QuantumNode object.
	Kind = "QuantumNode"
	// ListKind is the kind of a list of QuantumNodes.
	ListKind = "QuantumNodeList"
	// Resource is the plural resource name served by the apiserver.
	Resource = "quantumnodes"
	// Singular is the singular resource name.
	Singular = "quantumnode"
	// ShortName is the kubectl short name.
	ShortName = "qn"
)

var (
	// GroupVersion is the group and version of the QuantumNode API.
	GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

	// GroupVersionKind identifies a QuantumNode.
	GroupVersionKind = GroupVersion.WithKind(Kind)

	// GroupVersionResource identifies the quantumnodes resource, as admission
	// requests and dynamic clients name it.
	GroupVersionResource = GroupVersion.WithResource(Resource)

	// SchemeBuilder registers the QuantumNode types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the QuantumNode types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// GroupResource qualifies a resource name of this group, as API errors and
// RESTMapper lookups expect.
func GroupResource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &QuantumNode{}, &QuantumNodeList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
