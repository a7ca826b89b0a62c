package kyvernoparity

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	kyvernov1 "github.com/kyverno/kyverno/api/kyverno/v1"
	kyvernov2 "github.com/kyverno/kyverno/api/kyverno/v2"
	"github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/apis/v1alpha1"
	"github.com/kyverno/kyverno/pkg/config"
	"github.com/kyverno/kyverno/pkg/engine"
	engineapi "github.com/kyverno/kyverno/pkg/engine/api"
	enginecontext "github.com/kyverno/kyverno/pkg/engine/context"
	"github.com/kyverno/kyverno/pkg/engine/factories"
	"github.com/kyverno/kyverno/pkg/engine/jmespath"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The Kyverno side: a test folder read with Kyverno's own API types and
// judged by Kyverno's engine the way `kyverno test` sets it up offline (no
// cluster, no registry, values as variables).

// folder is one Kyverno test folder.
type folder struct {
	dir       string
	test      *v1alpha1.Test
	policies  []kyvernov1.PolicyInterface
	resources []*unstructured.Unstructured
	values    *v1alpha1.ValuesSpec
	userInfo  *kyvernov2.RequestInfo
	// cel are its ValidatingPolicies and ValidatingAdmissionPolicies.
	cel celPolicies
}

// verdict is one rule's result on one resource under one operation.
type verdict struct {
	Op       string
	Policy   string // namespace/name for a Policy
	Rule     string
	Resource *unstructured.Unstructured
	Status   string // pass, fail, warn, error, skip
	Message  string
	// CEL: the verdict of a CEL policy, whose one result answers a row
	// whatever rule it names.
	CEL bool
}

// label is the resource as qnctl and Kyverno's CLI print it.
func label(r *unstructured.Unstructured) string {
	parts := []string{r.GetAPIVersion(), r.GetKind()}
	if r.GetNamespace() != "" {
		parts = append(parts, r.GetNamespace())
	}
	return strings.Join(append(parts, r.GetName()), "/")
}

// rowName is how a results row names a resource.
func rowName(r *unstructured.Unstructured) string {
	if r.GetNamespace() != "" {
		return r.GetNamespace() + "/" + r.GetName()
	}
	return r.GetName()
}

func policyLabel(p kyvernov1.PolicyInterface) string {
	if p.GetNamespace() != "" {
		return p.GetNamespace() + "/" + p.GetName()
	}
	return p.GetName()
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// documents splits a YAML file into its non-empty documents.
func documents(path string) ([][]byte, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, part := range docSeparator.Split(string(src), -1) {
		js, err := yaml.YAMLToJSON([]byte(part))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if t := bytes.TrimSpace(js); len(t) > 0 && string(t) != "null" {
			out = append(out, js)
		}
	}
	return out, nil
}

// files is path itself, or the YAML and JSON files under the folder.
func files(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var out []string
	err = filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(p)) {
			out = append(out, p)
		}
		return err
	})
	sort.Strings(out)
	return out, err
}

// loadFolder reads a test file and everything it names.
func loadFolder(testFile string) (*folder, error) {
	f := &folder{dir: filepath.Dir(testFile)}
	docs, err := documents(testFile)
	if err != nil {
		return nil, err
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("%s: want one Test document, got %d", testFile, len(docs))
	}
	f.test = &v1alpha1.Test{}
	if err := yaml.UnmarshalStrict(docs[0], f.test); err != nil {
		return nil, fmt.Errorf("%s: %w", testFile, err)
	}
	for _, p := range f.test.Policies {
		paths, err := files(filepath.Join(f.dir, p))
		if err != nil {
			return nil, err
		}
		for _, path := range paths {
			docs, err := documents(path)
			if err != nil {
				return nil, err
			}
			if src, _ := os.ReadFile(path); bytes.Contains(src, []byte("policies.kyverno.io/")) || bytes.Contains(src, []byte("admissionregistration.k8s.io/")) {
				if err := f.cel.load(path); err != nil {
					return nil, err
				}
			}
			for _, d := range docs {
				var tm struct{ Kind string }
				if err := yaml.Unmarshal(d, &tm); err != nil {
					return nil, err
				}
				switch tm.Kind {
				case "ClusterPolicy":
					var cp kyvernov1.ClusterPolicy
					if err := yaml.Unmarshal(d, &cp); err != nil {
						return nil, fmt.Errorf("%s: %w", path, err)
					}
					f.policies = append(f.policies, &cp)
				case "Policy":
					var np kyvernov1.Policy
					if err := yaml.Unmarshal(d, &np); err != nil {
						return nil, fmt.Errorf("%s: %w", path, err)
					}
					f.policies = append(f.policies, &np)
				}
			}
		}
	}
	for _, p := range f.test.Resources {
		paths, err := files(filepath.Join(f.dir, p))
		if err != nil {
			return nil, err
		}
		for _, path := range paths {
			docs, err := documents(path)
			if err != nil {
				return nil, err
			}
			for _, d := range docs {
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(d); err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
				// Kyverno's CLI puts a namespaced resource that names no
				// namespace in "default".
				if u.GetNamespace() == "" && !clusterScoped(u.GetAPIVersion(), u.GetKind()) {
					u.SetNamespace("default")
				}
				f.resources = append(f.resources, u)
			}
		}
	}
	f.values = f.test.Values
	if f.test.Variables != "" {
		docs, err := documents(filepath.Join(f.dir, f.test.Variables))
		if err != nil {
			return nil, err
		}
		var v v1alpha1.Values
		if len(docs) == 1 {
			if err := yaml.UnmarshalStrict(docs[0], &v); err != nil {
				return nil, fmt.Errorf("%s: %w", f.test.Variables, err)
			}
		}
		f.values = &v.ValuesSpec
	}
	if f.test.UserInfo != "" {
		docs, err := documents(filepath.Join(f.dir, f.test.UserInfo))
		if err != nil {
			return nil, err
		}
		var u v1alpha1.UserInfo
		if len(docs) == 1 {
			if err := yaml.UnmarshalStrict(docs[0], &u); err != nil {
				return nil, fmt.Errorf("%s: %w", f.test.UserInfo, err)
			}
		}
		f.userInfo = &u.RequestInfo
	}
	return f, nil
}

// clusterScoped are the built-in kinds without a namespace, as Kyverno's
// CLI knows them (its data/api-group-resources.json).
func clusterScoped(apiVersion, kind string) bool {
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		group = ""
	}
	return slices.Contains(map[string][]string{
		"":                             {"ComponentStatus", "Namespace", "Node", "PersistentVolume"},
		"admissionregistration.k8s.io": {"MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"},
		"apiextensions.k8s.io":         {"CustomResourceDefinition"},
		"apiregistration.k8s.io":       {"APIService"},
		"rbac.authorization.k8s.io":    {"ClusterRole", "ClusterRoleBinding"},
		"scheduling.k8s.io":            {"PriorityClass"},
		"storage.k8s.io":               {"CSIDriver", "CSINode", "StorageClass", "VolumeAttachment", "VolumeAttributesClass"},
		"networking.k8s.io":            {"IPAddress", "IngressClass", "ServiceCIDR"},
		"node.k8s.io":                  {"RuntimeClass"},
		"certificates.k8s.io":          {"CertificateSigningRequest"},
	}[group], kind)
}

// ruleValues are the values a values file gives one rule.
func (f *folder) ruleValues(policy, rule string) map[string]any {
	if f.values == nil {
		return nil
	}
	for _, p := range f.values.Policies {
		if p.Name != policy {
			continue
		}
		for _, r := range p.Rules {
			if r.Name == rule {
				return r.Values
			}
		}
	}
	return nil
}

// resourceValues are the global values, then the resource's own.
func (f *folder) resourceValues(policy, resource string) map[string]any {
	out := map[string]any{}
	if f.values != nil {
		for k, v := range f.values.GlobalValues {
			out[k] = v
		}
		for _, p := range f.values.Policies {
			if p.Name != policy {
				continue
			}
			for _, r := range p.Resources {
				if r.Name == resource {
					for k, v := range r.Values {
						out[k] = v
					}
				}
			}
		}
	}
	if _, ok := out["request.operation"]; !ok {
		out["request.operation"] = "CREATE"
	}
	return out
}

func (f *folder) namespaceLabels(ns string) map[string]string {
	if f.values == nil {
		return nil
	}
	for _, n := range f.values.NamespaceSelectors {
		if n.Name == ns {
			return n.Labels
		}
	}
	return nil
}

// judge runs Kyverno's engine on every (resource, policy) pair under op
// ("" is the values' request.operation, else CREATE).
func (f *folder) judge(op string) ([]verdict, error) {
	cfg := config.NewDefaultConfiguration(false)
	jp := jmespath.New(cfg)
	isCluster := false
	// Rule values stand in for context entries, set before they load, as
	// the CLI's context loader sets them.
	ruleLoader := func(policy kyvernov1.PolicyInterface, rule kyvernov1.Rule) engineapi.ContextLoader {
		values := f.ruleValues(policy.GetName(), rule.Name)
		return factories.DefaultContextLoaderFactory(nil, factories.WithInitializer(func(jctx enginecontext.Interface) error {
			for k, v := range values {
				if err := jctx.AddVariable(k, v); err != nil {
					return err
				}
			}
			return nil
		}))(policy, rule)
	}
	eng := engine.NewEngine(cfg, jp, nil, nil, nil, ruleLoader, nil, &isCluster)
	var out []verdict
	for _, res := range f.resources {
		for _, pol := range f.policies {
			pc, err := f.policyContext(jp, cfg, res, pol, op)
			if err != nil {
				return nil, fmt.Errorf("%s on %s: %w", pol.GetName(), label(res), err)
			}
			resp := eng.Validate(context.Background(), pc)
			for _, rr := range resp.PolicyResponse.Rules {
				// As Kyverno's CLI reports it: a failure of a policy that is
				// not scored is a warning.
				status := string(rr.Status())
				if rr.Status() == engineapi.RuleStatusWarn || rr.Status() == engineapi.RuleStatusFail && pol.GetAnnotations()["policies.kyverno.io/scored"] == "false" {
					status = "warn"
				}
				out = append(out, verdict{Op: op, Policy: policyLabel(pol), Rule: rr.Name(), Resource: res, Status: status, Message: rr.Message()})
			}
		}
	}
	cel, err := f.judgeCEL(op)
	if err != nil {
		return nil, err
	}
	return append(out, cel...), nil
}

// policyContext is the request Kyverno's CLI builds for one resource and
// policy: the operation, the object (and old object), the values as
// variables, the namespace's labels from the values file.
func (f *folder) policyContext(jp jmespath.Interface, cfg config.Configuration, res *unstructured.Unstructured, pol kyvernov1.PolicyInterface, op string) (*engine.PolicyContext, error) {
	values := f.resourceValues(pol.GetName(), res.GetName())
	if op != "" {
		values["request.operation"] = op
	}
	operation := kyvernov1.Create
	switch values["request.operation"] {
	case "UPDATE":
		operation = kyvernov1.Update
	case "DELETE":
		operation = kyvernov1.Delete
	}
	resource := res.DeepCopy()
	newResource := *resource
	if operation == kyvernov1.Delete {
		newResource = unstructured.Unstructured{}
	}
	pc, err := engine.NewPolicyContext(jp, newResource, operation, f.userInfo, cfg)
	if err != nil {
		return nil, err
	}
	if operation != kyvernov1.Create {
		old := res.DeepCopy()
		pc = pc.WithOldResource(*old)
		if err := pc.JSONContext().AddOldResource(old.Object); err != nil {
			return nil, err
		}
	}
	pc = pc.WithPolicy(pol).WithNamespaceLabels(f.namespaceLabels(res.GetNamespace())).WithResourceKind(res.GroupVersionKind(), "")
	for k, v := range values {
		if err := pc.JSONContext().AddVariable(k, v); err != nil {
			return nil, err
		}
	}
	// The values may have changed the object: read it back.
	read := func(path string) (unstructured.Unstructured, error) {
		v, err := pc.JSONContext().Query(path)
		if err != nil {
			return unstructured.Unstructured{}, err
		}
		if m, ok := v.(map[string]any); ok {
			return unstructured.Unstructured{Object: m}, nil
		}
		return unstructured.Unstructured{}, nil
	}
	if operation != kyvernov1.Delete {
		obj, err := read("request.object")
		if err != nil {
			return nil, err
		}
		pc = pc.WithNewResource(obj)
	}
	if operation != kyvernov1.Create {
		old, err := read("request.oldObject")
		if err != nil {
			return nil, err
		}
		pc = pc.WithOldResource(old)
	}
	return pc, nil
}
