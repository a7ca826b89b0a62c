package vap

import (
	"fmt"
	"slices"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/rego"
)

// A translation says what becomes of one bundled Rego package. Rego in
// general does not compile to CEL; these packages are known, and their
// rules that are plain comparisons of a label or an annotation with a role
// parameter are written here as conditions. A package compiles only when
// the policy set holds it, and the packages it reads, exactly as bundled
// (comments and layout aside): an edited package may mean something else.
type translation struct {
	// what the package checks, for the report.
	what string
	// where it is enforced besides the webhook; why, when not in the API
	// server's policy.
	where Where
	why   string
	// needs are the other packages its rules read.
	needs []string
	// paramsRole is the role whose parameters the module reads: it is
	// written in the module (data.roles.realtime), whichever role lists it.
	paramsRole string
	// compile turns the role's parameters into conditions, or says which
	// parameter does not compile.
	compile func(params map[string]any) (qnv1alpha1.RoleConditions, error)
}

// Label and annotation keys the bundled role packages read.
const (
	zoneLabel          = "topology.kubernetes.io/zone"
	latencyBudget      = "qn.dev/latency-budget-ms"
	batchPriorityLabel = "priority"
)

var translations = map[string]translation{
	"qn.quantumnode": {
		what:  "service names and ports unique and valid, arch supported and immutable",
		where: WhereCRD,
		why:   "the QuantumNode CRD's schema and x-kubernetes-validations make every check (the API server refuses before any admission policy); the warning for ports below 1024 is the webhook's",
	},
	"qn.roles.realtime": {
		what:       "label " + zoneLabel + " in allowedZones, annotation " + latencyBudget + " below maxLatencyBudgetMs",
		where:      WhereAPIServer,
		needs:      []string{"qn.quantumnode"},
		paramsRole: "realtime",
		compile: func(params map[string]any) (qnv1alpha1.RoleConditions, error) {
			zones, err := stringList("roles.realtime.parameters.allowedZones", params["allowedZones"])
			if err != nil {
				return qnv1alpha1.RoleConditions{}, err
			}
			below, err := number("roles.realtime.parameters.maxLatencyBudgetMs", params["maxLatencyBudgetMs"])
			if err != nil {
				return qnv1alpha1.RoleConditions{}, err
			}
			return qnv1alpha1.RoleConditions{
				Labels:      []qnv1alpha1.ValueCondition{{Key: zoneLabel, Values: zones, Rule: "qn.roles.realtime: roles.realtime.parameters.allowedZones"}},
				Annotations: []qnv1alpha1.ValueCondition{{Key: latencyBudget, Below: below, BelowDecimals: decimals(below), Rule: "qn.roles.realtime: roles.realtime.parameters.maxLatencyBudgetMs"}},
			}, nil
		},
	},
	"qn.roles.batch": {
		what:       "label " + batchPriorityLabel + " equal to priority",
		where:      WhereAPIServer,
		needs:      []string{"qn.quantumnode"},
		paramsRole: "batch",
		compile: func(params map[string]any) (qnv1alpha1.RoleConditions, error) {
			v, ok := params["priority"].(string)
			if !ok || len(v) > 63 {
				return qnv1alpha1.RoleConditions{}, fmt.Errorf("roles.batch.parameters.priority is %s, not a label value (a string of at most 63 characters)", describe(params["priority"]))
			}
			return qnv1alpha1.RoleConditions{
				Labels: []qnv1alpha1.ValueCondition{{Key: batchPriorityLabel, Values: []string{v}, Rule: "qn.roles.batch: roles.batch.parameters.priority"}},
			}, nil
		},
	},
	"qn.window": {
		what:  "a warning near the rate window's limit",
		where: WhereWebhook,
		why:   "it reads the requester's rate window, which only the webhook counts",
	},
	"qn.mutate.managedby": {
		what:  "the label qn.dev/managed-by (a mutation)",
		where: WhereWebhook,
		why:   "a ValidatingAdmissionPolicy cannot change an object",
	},
}

// bundledModules are the bundled policy set's parsed modules by package.
var bundledModules = sync.OnceValues(func() (map[string][]*ast.Module, error) {
	modules, err := rego.ReadModules(rego.Bundled())
	if err != nil {
		return nil, err
	}
	compiled, err := rego.Compile(modules, nil, rego.CompileOptions{})
	if err != nil {
		return nil, fmt.Errorf("the bundled policies do not compile: %w", err)
	}
	return byPackage(compiled.Modules()), nil
})

// byPackage groups parsed modules by package, each group in a stable order.
func byPackage(modules map[string]*ast.Module) map[string][]*ast.Module {
	out := map[string][]*ast.Module{}
	for _, m := range modules {
		pkg := rego.PackageName(m)
		out[pkg] = append(out[pkg], m)
	}
	for _, group := range out {
		slices.SortFunc(group, func(a, b *ast.Module) int { return a.Compare(b) })
	}
	return out
}

// changedFromBundled returns the first of packages whose modules in the
// set differ from the bundled ones, or "".
func (c *compiler) changedFromBundled(packages []string) string {
	bundled, err := bundledModules()
	if err != nil {
		return packages[0]
	}
	if c.modules == nil {
		c.modules = byPackage(c.set.Compiled.Modules())
	}
	for _, pkg := range packages {
		if !slices.EqualFunc(c.modules[pkg], bundled[pkg], (*ast.Module).Equal) {
			return pkg
		}
	}
	return ""
}
