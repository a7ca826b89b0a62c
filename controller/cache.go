package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// CacheOptions trims what the manager's informers keep in memory: the
// controller watches every Node and Service of the cluster but reads few of
// their fields. Managed fields go everywhere; Nodes also lose their image
// list, often the largest part of a Node and never read here.
//
// Pods and ControllerRevisions are cached only when they carry the
// qn.dev/quantumnode label: the serving Pods of the label contract and the
// revisions the controller keeps, not every Pod of the cluster.
// EndpointSlices are cached whole-cluster (a QuantumNode's Service has no
// selector, so its slices carry no label of ours) but keep only what
// health reads: ports, addresses and the ready condition.
func CacheOptions() cache.Options {
	stripManaged := cache.TransformStripManagedFields()
	ours, err := labels.NewRequirement(qnv1alpha1.LabelQuantumNode, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	labelled := labels.NewSelector().Add(*ours)
	return cache.Options{
		DefaultTransform: stripManaged,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Transform: func(obj any) (any, error) {
				if node, ok := obj.(*corev1.Node); ok {
					node.Status.Images = nil
				}
				return stripManaged(obj)
			}},
			&corev1.Pod{}:                {Label: labelled},
			&appsv1.ControllerRevision{}: {Label: labelled},
			&discoveryv1.EndpointSlice{}: {Transform: func(obj any) (any, error) {
				if slice, ok := obj.(*discoveryv1.EndpointSlice); ok {
					slice.Annotations = nil
					for i := range slice.Endpoints {
						e := &slice.Endpoints[i]
						e.Hints, e.DeprecatedTopology, e.TargetRef, e.Zone, e.NodeName, e.Hostname = nil, nil, nil, nil, nil, nil
					}
				}
				return stripManaged(obj)
			}},
		},
	}
}
