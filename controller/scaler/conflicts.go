package scaler

import (
	"context"
	"fmt"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// scaleTargetIndex indexes every kind of scaler by the target it scales.
const scaleTargetIndex = "qn.dev/scale-target"

// ScaledObjectGVK is KEDA's ScaledObject, whose target the scaler leaves
// alone when the cluster serves the kind.
var ScaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// targetKey names a target independently of its API version: group, kind
// and name (the index is per namespace already).
func targetKey(apiVersion, kind, name string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group + "/" + kind + "/" + name
}

func scalerTargetKey(obj client.Object) []string {
	s, ok := obj.(*qnv1alpha1.HorizontalQNScaler)
	if !ok {
		return nil
	}
	r := s.Spec.ScaleTargetRef
	return []string{targetKey(r.APIVersion, r.Kind, r.Name)}
}

func hpaTargetKey(obj client.Object) []string {
	h, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return nil
	}
	r := h.Spec.ScaleTargetRef
	return []string{targetKey(r.APIVersion, r.Kind, r.Name)}
}

// scaledObjectTargetKey reads a ScaledObject's spec.scaleTargetRef with
// KEDA's defaults (apps/v1 Deployment).
func scaledObjectTargetKey(obj client.Object) []string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	ref, _, _ := unstructured.NestedStringMap(u.Object, "spec", "scaleTargetRef")
	apiVersion, kind := ref["apiVersion"], ref["kind"]
	if apiVersion == "" {
		apiVersion = "apps/v1"
	}
	if kind == "" {
		kind = "Deployment"
	}
	return []string{targetKey(apiVersion, kind, ref["name"])}
}

// conflicts names the other scalers of s's target that s yields to: any
// HorizontalPodAutoscaler or ScaledObject, and an older HorizontalQNScaler
// (by creation time, then name), so that exactly one of several
// HorizontalQNScalers scales and none fights another autoscaler.
func (r *Reconciler) conflicts(ctx context.Context, s *qnv1alpha1.HorizontalQNScaler) ([]string, error) {
	ref := s.Spec.ScaleTargetRef
	key := targetKey(ref.APIVersion, ref.Kind, ref.Name)
	in := []client.ListOption{client.InNamespace(s.Namespace), client.MatchingFields{scaleTargetIndex: key}}
	var found []string
	scalers := &qnv1alpha1.HorizontalQNScalerList{}
	if err := r.Client.List(ctx, scalers, in...); err != nil {
		return nil, fmt.Errorf("list HorizontalQNScalers of %s: %w", key, err)
	}
	for i := range scalers.Items {
		o := &scalers.Items[i]
		if o.UID == s.UID || !o.DeletionTimestamp.IsZero() {
			continue
		}
		older := o.CreationTimestamp.Before(&s.CreationTimestamp) ||
			(o.CreationTimestamp.Equal(&s.CreationTimestamp) && o.Name < s.Name)
		if older {
			found = append(found, "HorizontalQNScaler "+o.Name+" (older)")
		}
	}
	hpas := &autoscalingv2.HorizontalPodAutoscalerList{}
	if err := r.Client.List(ctx, hpas, in...); err != nil {
		return nil, fmt.Errorf("list HorizontalPodAutoscalers of %s: %w", key, err)
	}
	for _, h := range hpas.Items {
		found = append(found, "HorizontalPodAutoscaler "+h.Name)
	}
	if so := r.scaledObjects.Load(); so != nil {
		objs := &unstructured.UnstructuredList{}
		objs.SetGroupVersionKind(ScaledObjectGVK.GroupVersion().WithKind(ScaledObjectGVK.Kind + "List"))
		if err := so.List(ctx, objs, in...); err != nil {
			return nil, fmt.Errorf("list ScaledObjects of %s: %w", key, err)
		}
		for _, o := range objs.Items {
			found = append(found, "ScaledObject "+o.GetName())
		}
	}
	return found, nil
}

func conflictMessage(s *qnv1alpha1.HorizontalQNScaler, others []string) string {
	return fmt.Sprintf("%s also scale %s %s: this scaler reports its decisions but does not write while they do; remove one of them",
		strings.Join(others, ", "), s.Spec.ScaleTargetRef.Kind, s.Spec.ScaleTargetRef.Name)
}
