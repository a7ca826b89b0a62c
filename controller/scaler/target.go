package scaler

import (
	"context"
	"fmt"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/scale"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

// targetError is a target that cannot be read, with the AbleToScale reason.
type targetError struct {
	reason string
	msg    string
	// transient errors are returned to controller-runtime for a retry
	// with backoff; the others wait for the next poll.
	transient bool
}

func (e *targetError) Error() string { return e.msg }

// target is the resolved scaleTargetRef.
type target struct {
	resource schema.GroupResource
	name     string
	// describe names it in messages: "Deployment web".
	describe string
}

// resolveTarget maps scaleTargetRef to its resource through the REST
// mapper (discovery), as the HorizontalPodAutoscaler controller does, and
// checks that the resource serves /scale (a GET of a missing subresource
// answers 404, which would read as a missing target).
func resolveTarget(mapper meta.RESTMapper, kinds scale.ScaleKindResolver, ref qnv1alpha1.ScaleTargetRef) (target, error) {
	t := target{name: ref.Name, describe: ref.Kind + " " + ref.Name}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return t, &targetError{reason: qnv1alpha1.ScalerReasonInvalidTarget, msg: fmt.Sprintf("scaleTargetRef.apiVersion %q is not group/version: %v", ref.APIVersion, err)}
	}
	mapping, err := mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return t, &targetError{reason: qnv1alpha1.ScalerReasonInvalidTarget, msg: fmt.Sprintf("the API server serves no kind %s in %s (scaleTargetRef)", ref.Kind, ref.APIVersion)}
		}
		return t, &targetError{reason: qnv1alpha1.ScalerReasonFailedGetScale, msg: fmt.Sprintf("look up kind %s in %s: %v", ref.Kind, ref.APIVersion, err), transient: true}
	}
	if _, err := kinds.ScaleForResource(mapping.Resource); err != nil {
		if isNoScaleSubresource(err) {
			return t, &targetError{reason: qnv1alpha1.ScalerReasonInvalidTarget, msg: fmt.Sprintf("%s has no /scale subresource: only kinds that serve /scale can be scaled", t.describe)}
		}
		return t, &targetError{reason: qnv1alpha1.ScalerReasonFailedGetScale, msg: fmt.Sprintf("look up the /scale subresource of %s: %v", mapping.Resource, err), transient: true}
	}
	t.resource = mapping.Resource.GroupResource()
	return t, nil
}

// getScale reads the target's /scale.
func getScale(ctx context.Context, scales scale.ScalesGetter, namespace string, t target) (*autoscalingv1.Scale, error) {
	s, err := scales.Scales(namespace).Get(ctx, t.resource, t.name, metav1.GetOptions{})
	switch {
	case err == nil:
		return s, nil
	case apierrors.IsNotFound(err):
		return nil, &targetError{reason: qnv1alpha1.ScalerReasonTargetNotFound, msg: fmt.Sprintf("%s not found in namespace %s: create it or fix scaleTargetRef; the scaler retries every poll", t.describe, namespace)}
	case apierrors.IsForbidden(err):
		return nil, &targetError{reason: qnv1alpha1.ScalerReasonFailedGetScale, msg: fmt.Sprintf("qn-controller may not read the scale of %s (%v): add %s/scale to its RBAC (the chart's controller.scaler.scaleGroups lists the groups)", t.describe, err, t.resource)}
	case apierrors.IsMethodNotSupported(err):
		return nil, &targetError{reason: qnv1alpha1.ScalerReasonInvalidTarget, msg: fmt.Sprintf("%s has no /scale subresource: %v", t.describe, err)}
	}
	return nil, &targetError{reason: qnv1alpha1.ScalerReasonFailedGetScale, msg: fmt.Sprintf("read the scale of %s: %v", t.describe, err), transient: true}
}

// isNoScaleSubresource recognises the scale client's discovery answer for
// a kind without /scale: a plain error, known only by its text.
func isNoScaleSubresource(err error) bool {
	return strings.Contains(err.Error(), "could not find scale subresource")
}

// updateScale writes replicas to the target's /scale, on the version just
// read (a conflict means someone else changed it in between).
func updateScale(ctx context.Context, scales scale.ScalesGetter, namespace string, t target, current *autoscalingv1.Scale, replicas int32) error {
	s := current.DeepCopy()
	s.Spec.Replicas = replicas
	_, err := scales.Scales(namespace).Update(ctx, t.resource, s, metav1.UpdateOptions{FieldManager: FieldManager})
	return err
}
