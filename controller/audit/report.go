package audit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/policies"
)

// PolicyReportGVK is the community report format (wg-policy-prototypes),
// which Kyverno, Kubewarden and policy-reporter read.
var PolicyReportGVK = schema.GroupVersionKind{Group: "wgpolicyk8s.io", Version: "v1alpha2", Kind: "PolicyReport"}

// Names of the report objects.
const (
	// ReportName is the name of the PolicyReport in each namespace.
	ReportName = "qn-admission-quantumnodes"
	// reportSource is the source of every result.
	reportSource = "qn-admission"
	// annotationResultsOmitted counts results left out of a report that
	// would be too large (the summary still counts them).
	annotationResultsOmitted = "qn.dev/results-omitted"
	// maxReportResults keeps a report well under etcd's 1.5 MiB object
	// limit (a result is a few hundred bytes).
	maxReportResults = 2000
	// reportDelay gathers the node events of a burst (a policy change
	// rewrites many statuses) into one report write per namespace.
	reportDelay = time.Second
)

// reportReconciler keeps one PolicyReport per namespace that has
// QuantumNodes: a result for every node and rule that fails, warns or
// could not be evaluated, a result per rule the audit skips, and a summary
// that counts every node and rule, passes included. Passing results are
// counted but not listed, which keeps a namespace of thousands of
// compliant nodes to a small object. The report is recomputed from the
// cache and the engine, never patched by increments.
type reportReconciler struct {
	client client.Client
	reader client.Reader
	engine *policies.Engine

	// audits remembers each node's audit by resourceVersion and policy
	// revision, so a rebuild re-judges only what changed: a namespace of
	// thousands of nodes is rebuilt after every burst of node events.
	mu     sync.Mutex
	audits map[types.UID]rememberedAudit
}

type rememberedAudit struct {
	namespace, resourceVersion, revision string
	result                               policies.AuditResult
}

// audit judges qn, or returns its remembered audit when neither the node
// nor the policy revision changed since.
func (rr *reportReconciler) audit(ctx context.Context, qn *qnv1alpha1.QuantumNode) (policies.AuditResult, error) {
	revision := rr.engine.Current().Revision
	rr.mu.Lock()
	m, ok := rr.audits[qn.UID]
	rr.mu.Unlock()
	if ok && m.resourceVersion == qn.ResourceVersion && m.revision == revision {
		return m.result, nil
	}
	res, err := auditNode(ctx, rr.engine, qn)
	if err != nil {
		return res, err
	}
	rr.mu.Lock()
	rr.audits[qn.UID] = rememberedAudit{namespace: qn.Namespace, resourceVersion: qn.ResourceVersion, revision: res.Revision, result: res}
	rr.mu.Unlock()
	return res, nil
}

// forget drops the remembered audits of a namespace's nodes that are gone.
func (rr *reportReconciler) forget(ns string, present map[types.UID]bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	for uid, m := range rr.audits {
		if m.namespace == ns && !present[uid] {
			delete(rr.audits, uid)
		}
	}
}

func setupReports(mgr ctrl.Manager, engine *policies.Engine, sweeps <-chan event.GenericEvent) error {
	rr := &reportReconciler{client: mgr.GetClient(), reader: mgr.GetCache(), engine: engine, audits: map[types.UID]rememberedAudit{}}
	delayed := handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.AddAfter(namespaceRequest(e.Object), reportDelay)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.AddAfter(namespaceRequest(e.ObjectNew), reportDelay)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.AddAfter(namespaceRequest(e.Object), reportDelay)
		},
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("policyreport").
		WatchesRawSource(source.Kind(mgr.GetCache(), client.Object(&qnv1alpha1.QuantumNode{}), handler.TypedEventHandler[client.Object, reconcile.Request](delayed))).
		WatchesRawSource(source.Channel(sweeps, &handler.EnqueueRequestForObject{})).
		Complete(rr)
	if err != nil {
		return fmt.Errorf("build the policyreport controller: %w", err)
	}
	return nil
}

func namespaceRequest(obj client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKey{Name: obj.GetNamespace()}}
}

// namespaceObject stands for a namespace in the sweeper's events: its name
// is the key the report controller reconciles.
func namespaceObject(ns string) client.Object {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
}

// Reconcile rewrites the report of namespace req.Name.
func (rr *reportReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Name
	list := &qnv1alpha1.QuantumNodeList{}
	if err := rr.reader.List(ctx, list, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, fmt.Errorf("list QuantumNodes in %s: %w", ns, err)
	}
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(PolicyReportGVK)
	err := rr.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ReportName}, current)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("read PolicyReport %s/%s: %w", ns, ReportName, err)
	}
	var nodes []auditedNode
	present := map[types.UID]bool{}
	for i := range list.Items {
		qn := &list.Items[i]
		if !qn.DeletionTimestamp.IsZero() {
			continue
		}
		res, err := rr.audit(ctx, qn)
		if err != nil {
			return ctrl.Result{}, err
		}
		present[qn.UID] = true
		nodes = append(nodes, auditedNode{Node: qn, Result: res})
	}
	rr.forget(ns, present)
	if len(nodes) == 0 {
		if exists {
			if err := rr.client.Delete(ctx, current); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("delete PolicyReport %s/%s of a namespace without QuantumNodes: %w", ns, ReportName, err)
			}
		}
		return ctrl.Result{}, nil
	}
	want := buildPolicyReport(ns, nodes)
	if !exists {
		if err := rr.client.Create(ctx, want, client.FieldOwner(controller.ManagerName)); err != nil {
			return ctrl.Result{}, fmt.Errorf("create PolicyReport %s/%s: %w", ns, ReportName, err)
		}
		return ctrl.Result{}, nil
	}
	if reportEqual(current, want) {
		return ctrl.Result{}, nil
	}
	want.SetResourceVersion(current.GetResourceVersion())
	if err := rr.client.Update(ctx, want, client.FieldOwner(controller.ManagerName)); err != nil {
		if apierrors.IsConflict(err) {
			// Someone wrote it since the read: rebuild from fresh facts.
			return ctrl.Result{RequeueAfter: reportDelay}, nil
		}
		return ctrl.Result{}, fmt.Errorf("update PolicyReport %s/%s: %w", ns, ReportName, err)
	}
	return ctrl.Result{}, nil
}

// reportEqual compares what the controller writes: results, summary, the
// labels and the omitted-results annotation.
func reportEqual(a, b *unstructured.Unstructured) bool {
	return equality.Semantic.DeepEqual(a.Object["results"], b.Object["results"]) &&
		equality.Semantic.DeepEqual(a.Object["summary"], b.Object["summary"]) &&
		a.GetLabels()[controller.LabelManagedBy] == b.GetLabels()[controller.LabelManagedBy] &&
		a.GetAnnotations()[annotationResultsOmitted] == b.GetAnnotations()[annotationResultsOmitted]
}

// auditedNode is a QuantumNode with its audit.
type auditedNode struct {
	Node   *qnv1alpha1.QuantumNode
	Result policies.AuditResult
}

// buildPolicyReport is the report of a namespace: pure, so it is tested
// without a cluster and compared with the stored one field by field.
func buildPolicyReport(ns string, nodes []auditedNode) *unstructured.Unstructured {
	slices.SortFunc(nodes, func(a, b auditedNode) int { return cmp.Compare(a.Node.Name, b.Node.Name) })
	summary := map[string]int64{"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
	var results []any
	type skipKey struct{ pkg, rule string }
	skips := map[skipKey]*policies.RuleResult{}
	skipCount := map[skipKey]int{}
	var skipOrder []skipKey
	revision := ""
	for _, n := range nodes {
		revision = n.Result.Revision
		for i := range n.Result.Rules {
			rule := &n.Result.Rules[i]
			summary[string(rule.Verdict)]++
			switch rule.Verdict {
			case policies.VerdictPass:
			case policies.VerdictSkip:
				k := skipKey{rule.Package, rule.Rule}
				if skips[k] == nil {
					skips[k] = rule
					skipOrder = append(skipOrder, k)
				}
				skipCount[k]++
			default:
				results = append(results, nodeResult(n, rule))
			}
		}
	}
	// Failures first, so a truncated report keeps what matters most.
	rank := map[string]int{"fail": 0, "error": 1, "warn": 2}
	slices.SortStableFunc(results, func(a, b any) int {
		return cmp.Compare(rank[a.(map[string]any)["result"].(string)], rank[b.(map[string]any)["result"].(string)])
	})
	for _, k := range skipOrder {
		results = append(results, map[string]any{
			"policy": k.pkg, "rule": k.rule, "result": string(policies.VerdictSkip), "source": reportSource, "scored": false,
			"message":    fmt.Sprintf("%s (%d QuantumNodes)", strings.Join(skips[k].Messages, "; "), skipCount[k]),
			"properties": map[string]any{"revision": revision},
		})
	}
	report := &unstructured.Unstructured{Object: map[string]any{}}
	report.SetGroupVersionKind(PolicyReportGVK)
	report.SetNamespace(ns)
	report.SetName(ReportName)
	report.SetLabels(map[string]string{controller.LabelManagedBy: controller.ManagerName})
	if omitted := len(results) - maxReportResults; omitted > 0 {
		results = results[:maxReportResults]
		report.SetAnnotations(map[string]string{annotationResultsOmitted: strconv.Itoa(omitted)})
	}
	if results == nil {
		results = []any{}
	}
	report.Object["results"] = results
	s := map[string]any{}
	for k, v := range summary {
		s[k] = v
	}
	report.Object["summary"] = s
	return report
}

func nodeResult(n auditedNode, rule *policies.RuleResult) map[string]any {
	props := map[string]any{
		"role": n.Result.Role, "revision": n.Result.Revision,
		"generation": strconv.FormatInt(n.Node.Generation, 10),
	}
	if len(rule.Skipped) > 0 {
		var locs []string
		for _, s := range rule.Skipped {
			locs = append(locs, s.Location)
		}
		props["skippedDefinitions"] = strings.Join(locs, ", ")
	}
	return map[string]any{
		"policy": rule.Package, "rule": rule.Rule, "result": string(rule.Verdict),
		"message": strings.Join(rule.Messages, "; "), "source": reportSource, "scored": true,
		"resources": []any{map[string]any{
			"apiVersion": qnv1alpha1.GroupVersion.String(), "kind": qnv1alpha1.GroupVersionKind.Kind,
			"namespace": n.Node.Namespace, "name": n.Node.Name, "uid": string(n.Node.UID),
		}},
		"properties": props,
	}
}
