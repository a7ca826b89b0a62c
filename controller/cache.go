package controller

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions trims what the manager's informers keep in memory: the
// controller watches every Node and Service of the cluster but reads few of
// their fields. Managed fields go everywhere; Nodes also lose their image
// list, often the largest part of a Node and never read here.
func CacheOptions() cache.Options {
	stripManaged := cache.TransformStripManagedFields()
	return cache.Options{
		DefaultTransform: stripManaged,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Transform: func(obj any) (any, error) {
				if node, ok := obj.(*corev1.Node); ok {
					node.Status.Images = nil
				}
				return stripManaged(obj)
			}},
		},
	}
}
