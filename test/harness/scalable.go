package harness

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// WorkerGroup is the API group of WorkerCRD, outside every group the
// project's RBAC grants */scale in by default.
const WorkerGroup = "scaling.qn-test.dev"

// WorkerCRD is a custom resource with a /scale subresource (Worker,
// scaling.qn-test.dev/v1, spec.replicas), as an operator of a queue
// consumer would define it, for the scaler's tests of custom targets.
func WorkerCRD() *apiextensionsv1.CustomResourceDefinition {
	replicas := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"replicas": {Type: "integer", Format: "int32"},
	}}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "workers." + WorkerGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: WorkerGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "workers", Singular: "worker", Kind: "Worker", ListKind: "WorkerList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": replicas, "status": replicas},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"},
				},
			}},
		},
	}
}

// Worker is a WorkerCRD object of replicas in namespace, to create.
func Worker(namespace, name string, replicas int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": WorkerGroup + "/v1", "kind": "Worker",
		"metadata": map[string]any{"namespace": namespace, "name": name},
		"spec":     map[string]any{"replicas": replicas},
	}}
}
