package harness

import (
	"context"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WebhookRegistration names a pair of webhook configurations pointing at one
// qn-webhook process.
type WebhookRegistration struct {
	Name          string
	ValidateURL   string
	MutateURL     string
	CABundle      []byte
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// NamespaceSelector scopes the webhooks; kube-system is always excluded.
	NamespaceSelector *metav1.LabelSelector
	// AdditionalResources register the validating webhook for more
	// resources, as the chart's webhook.additionalResources do.
	AdditionalResources []AdditionalRule
}

// AdditionalRule is one entry of the chart's webhook.additionalResources.
// RegisterWebhooks renders the entries as the chart does: one validating
// webhook per failurePolicy (validate-additional.<name>.qn.dev, Ignore;
// validate-additional-fail.<name>.qn.dev, Fail), namespaced objects only,
// with the QuantumNode webhook's namespace selector, side effects, timeout
// and matchPolicy.
type AdditionalRule struct {
	APIGroups, APIVersions, Resources []string
	// Operations default to CREATE and UPDATE.
	Operations []admissionregistrationv1.OperationType
	// FailurePolicy defaults to Ignore.
	FailurePolicy admissionregistrationv1.FailurePolicyType
}

// AdditionalResourceArgs are the qn-webhook flags the chart renders for
// rules: one --additional-resources=RESOURCE.VERSION[.GROUP]:OPS each.
func AdditionalResourceArgs(rules []AdditionalRule) []string {
	var args []string
	for _, r := range rules {
		ops := make([]string, 0, len(r.Operations))
		for _, op := range r.operations() {
			ops = append(ops, string(op))
		}
		for _, g := range r.APIGroups {
			for _, v := range r.APIVersions {
				for _, res := range r.Resources {
					spec := res + "." + v
					if g != "" {
						spec += "." + g
					}
					args = append(args, "--additional-resources="+spec+":"+strings.Join(ops, ","))
				}
			}
		}
	}
	return args
}

func (r AdditionalRule) operations() []admissionregistrationv1.OperationType {
	if len(r.Operations) == 0 {
		return []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	}
	return r.Operations
}

func (r AdditionalRule) failurePolicy() admissionregistrationv1.FailurePolicyType {
	if r.FailurePolicy == "" {
		return admissionregistrationv1.Ignore
	}
	return r.FailurePolicy
}

// RegisterWebhooks creates (or replaces) the Validating and Mutating
// WebhookConfigurations for QuantumNodes (and the scalers' validation),
// with the fail-safe settings the chart uses: our resources only,
// sideEffects None, a bounded timeout, kube-system excluded.
func RegisterWebhooks(ctx context.Context, kube kubernetes.Interface, r WebhookRegistration) error {
	sideEffects := admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	equivalent := admissionregistrationv1.Equivalent
	reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
	failurePolicy := r.FailurePolicy
	ignore := admissionregistrationv1.Ignore
	selector := r.NamespaceSelector
	if selector == nil {
		selector = &metav1.LabelSelector{}
	}
	selector = selector.DeepCopy()
	selector.MatchExpressions = append(selector.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"},
	})
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{QuantumNodes.Group}, APIVersions: []string{QuantumNodes.Version}, Resources: []string{QuantumNodes.Resource},
		},
	}}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate." + r.Name + ".qn.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &r.ValidateURL, CABundle: r.CABundle},
			Rules:                   rules,
			FailurePolicy:           &failurePolicy,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       selector,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}, {
			// HorizontalQNScalers: their PromQL is parsed. Ignore on
			// failure, as the chart does: the CRD's own rules hold without
			// the webhook, and a scaler must stay pausable when it is down.
			Name:         "validate-scalers." + r.Name + ".qn.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &r.ValidateURL, CABundle: r.CABundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{Scalers.Group}, APIVersions: []string{Scalers.Version}, Resources: []string{Scalers.Resource},
				},
			}},
			FailurePolicy:           &ignore,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       selector,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	// webhook.additionalResources, as the chart renders them.
	namespaced := admissionregistrationv1.NamespacedScope
	for _, policy := range []admissionregistrationv1.FailurePolicyType{admissionregistrationv1.Ignore, admissionregistrationv1.Fail} {
		var additional []admissionregistrationv1.RuleWithOperations
		for _, a := range r.AdditionalResources {
			if a.failurePolicy() == policy {
				additional = append(additional, admissionregistrationv1.RuleWithOperations{
					Operations: a.operations(),
					Rule:       admissionregistrationv1.Rule{APIGroups: a.APIGroups, APIVersions: a.APIVersions, Resources: a.Resources, Scope: &namespaced},
				})
			}
		}
		if len(additional) == 0 {
			continue
		}
		name := "validate-additional." + r.Name + ".qn.dev"
		if policy == admissionregistrationv1.Fail {
			name = "validate-additional-fail." + r.Name + ".qn.dev"
		}
		validating.Webhooks = append(validating.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &r.ValidateURL, CABundle: r.CABundle},
			Rules:                   additional,
			FailurePolicy:           &policy,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       selector,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mutate." + r.Name + ".qn.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &r.MutateURL, CABundle: r.CABundle},
			Rules:                   rules[:1:1],
			FailurePolicy:           &failurePolicy,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       selector,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &reinvoke,
		}},
	}
	// Mutating only on writes that carry an object.
	mutating.Webhooks[0].Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       rules[0].Rule,
	}}
	if err := upsert(ctx, kube.AdmissionregistrationV1().ValidatingWebhookConfigurations(), validating); err != nil {
		return err
	}
	return upsert(ctx, kube.AdmissionregistrationV1().MutatingWebhookConfigurations(), mutating)
}

// webhookConfig is what upsert needs of either configuration kind.
type webhookConfig interface {
	GetName() string
	GetResourceVersion() string
	SetResourceVersion(string)
}

// configAPI is the client of one configuration kind.
type configAPI[T webhookConfig] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// upsert creates cfg, or replaces the existing object of its name.
func upsert[T webhookConfig](ctx context.Context, api configAPI[T], cfg T) error {
	existing, err := api.Get(ctx, cfg.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, cfg, metav1.CreateOptions{})
		return err
	} else if err != nil {
		return err
	}
	cfg.SetResourceVersion(existing.GetResourceVersion())
	_, err = api.Update(ctx, cfg, metav1.UpdateOptions{})
	return err
}
