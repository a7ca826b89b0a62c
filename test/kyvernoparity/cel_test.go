package kyvernoparity

import (
	"context"
	"fmt"
	"strings"

	policiesv1beta1 "github.com/kyverno/api/api/policies.kyverno.io/v1beta1"
	"github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/policy"
	"github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/processor"
	"github.com/kyverno/kyverno/pkg/admissionpolicy"
	celengine "github.com/kyverno/kyverno/pkg/cel/engine"
	"github.com/kyverno/kyverno/pkg/cel/libs"
	"github.com/kyverno/kyverno/pkg/cel/matching"
	vpolcompiler "github.com/kyverno/kyverno/pkg/cel/policies/vpol/compiler"
	vpolengine "github.com/kyverno/kyverno/pkg/cel/policies/vpol/engine"
	engineapi "github.com/kyverno/kyverno/pkg/engine/api"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The CEL policy kinds, judged as `kyverno test` judges them offline:
// ValidatingPolicies by Kyverno's CEL engine (pkg/cel/policies/vpol) with
// its matcher and a fake context provider, ValidatingAdmissionPolicies
// and their bindings by its pkg/admissionpolicy, always as a CREATE.
// Each gives one verdict per policy and resource: no rule name for a
// ValidatingPolicy, the policy's name for a ValidatingAdmissionPolicy.

// celPolicies are a folder's CEL policies, read by Kyverno's CLI loader.
type celPolicies struct {
	vpols    []policiesv1beta1.ValidatingPolicyLike
	vaps     []admissionregistrationv1.ValidatingAdmissionPolicy
	bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// loadCEL reads the CEL policies of one policy file.
func (c *celPolicies) load(path string) error {
	res, err := policy.Load(nil, "", path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	c.vpols = append(c.vpols, res.ValidatingPolicies...)
	c.vaps = append(c.vaps, res.VAPs...)
	c.bindings = append(c.bindings, res.VAPBindings...)
	return nil
}

// names are the CEL policies as rows name them.
func (c *celPolicies) names() []string {
	var out []string
	for _, p := range c.vpols {
		out = append(out, celLabel(p.GetNamespace(), p.GetName()))
	}
	for _, p := range c.vaps {
		out = append(out, p.Name)
	}
	return out
}

func celLabel(ns, name string) string {
	if ns != "" {
		return ns + "/" + name
	}
	return name
}

// resourceOf is the resource Kyverno's CLI maps an offline kind to: its
// lower-case plural.
func resourceOf(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	return gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind) + "s")
}

// judgeCEL is the verdict of each CEL policy on each resource under op.
func (f *folder) judgeCEL(op string) ([]verdict, error) {
	c := f.cel
	if len(c.vpols) == 0 && len(c.vaps) == 0 {
		return nil, nil
	}
	shape := op
	if shape == "" {
		shape, _ = f.resourceValues("", "")["request.operation"].(string)
	}
	var user authenticationv1.UserInfo
	if f.userInfo != nil {
		user = f.userInfo.AdmissionUserInfo
	}
	ctx := context.Background()
	var out []verdict
	var eng vpolengine.Engine
	if len(c.vpols) > 0 {
		provider, err := vpolengine.NewProvider(vpolcompiler.NewCompiler(), c.vpols, nil)
		if err != nil {
			return nil, err
		}
		eng = vpolengine.NewEngine(provider, func(string) *corev1.Namespace { return nil }, matching.NewMatcher())
	}
	for _, res := range f.resources {
		gvk := res.GroupVersionKind()
		gvr := resourceOf(gvk)
		if eng != nil {
			operation, object, oldObject := processor.AdmissionRequestShape(shape, res.DeepCopy())
			req := celengine.Request(libs.NewFakeContextProvider(), gvk, gvr, "", res.GetName(), res.GetNamespace(), operation, user, object, oldObject, false, nil)
			resp, err := eng.Handle(ctx, req, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", label(res), err)
			}
			for _, p := range resp.Policies {
				for _, rr := range p.Rules {
					out = append(out, verdict{Op: op, Policy: celLabel(p.Policy.GetNamespace(), p.Policy.GetName()), Rule: rr.Name(), Resource: res, Status: string(rr.Status()), Message: rr.Message(), CEL: true})
				}
			}
		}
		for i := range c.vaps {
			vap := c.vaps[i].DeepCopy()
			data := engineapi.NewValidatingAdmissionPolicyData(vap)
			for _, b := range c.bindings {
				if b.Spec.PolicyName == vap.Name {
					data.AddBinding(*b.DeepCopy())
				}
			}
			resp, err := admissionpolicy.Validate(data, *res.DeepCopy(), gvk, gvr, map[string]map[string]string{}, nil, &user, true)
			if err != nil {
				return nil, fmt.Errorf("%s on %s: %w", vap.Name, label(res), err)
			}
			for _, rr := range resp.PolicyResponse.Rules {
				out = append(out, verdict{Op: op, Policy: vap.Name, Rule: rr.Name(), Resource: res, Status: string(rr.Status()), Message: rr.Message(), CEL: true})
			}
		}
	}
	return out, nil
}

// The known differences of the CEL fixture folders (see knownDifferences).
func init() {
	for _, op := range []string{"", " (UPDATE)"} {
		// The Deployment too: the policy's autogen variant judges its pod
		// template, in Kyverno's CLI whatever its namespace.
		for _, res := range []string{"v1/Pod/default/latest-pod", "v1/Pod/default/untagged-pod", "v1/Pod/default/exempt-pod", "apps/v1/Deployment/default/web"} {
			knownDifferences["vpol-pods: shop/shop-no-host-network rule  on "+res+op] = namespacedInCLI
		}
	}
}

const (
	// Kyverno's CLI hands its engine every policy and the engine leaves a
	// NamespacedValidatingPolicy's namespace to its caller: the CLI judges
	// one on resources of every namespace. qnctl judges its own namespace
	// only, as the admission controller does.
	namespacedInCLI = "NamespacedValidatingPolicy: Kyverno's CLI judges resources of other namespaces, qnctl does not"
)
