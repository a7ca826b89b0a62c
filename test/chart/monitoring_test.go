package chart

import (
	"bytes"
	"encoding/json"
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// monitoringValues switches every monitoring object on.
const monitoringValues = "metrics: {serviceMonitor: {enabled: true, labels: {release: kube-prometheus-stack}}, prometheusRule: {enabled: true, slo: {enabled: true}}, dashboard: {enabled: true}}"

// alertsTestdata is the PrometheusRule's rule groups as Prometheus reads a
// rule file; test/alerts (a module of its own, for Prometheus' rule parser
// and query engine) parses and exercises them. UPDATE_ALERTS_TESTDATA=1
// rewrites it from the chart.
var alertsTestdata = filepath.Join(chartrender.Dir(), "..", "..", "test", "alerts", "testdata", "rules.yaml")

func TestMonitoringIsOffByDefault(t *testing.T) {
	rel := render(t, "")
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		if n := rel.Kinds()[kind]; n != 0 {
			t.Errorf("%d %s rendered by default", n, kind)
		}
	}
	for _, name := range []string{fullname + "-dashboard", fullname + "-controller-metrics"} {
		if rel.Find("ConfigMap", name) != nil || rel.Find("Service", name) != nil {
			t.Errorf("%s rendered by default", name)
		}
	}
}

// Each ServiceMonitor selects exactly the Service it is meant for, in the
// release namespace, on a port that Service has and whose target the Pods
// serve.
func TestServiceMonitorsSelectTheirServices(t *testing.T) {
	rel := render(t, monitoringValues)
	services := map[string]*corev1.Service{}
	for _, obj := range rel.Objects {
		if obj.GetKind() == "Service" {
			services[obj.GetName()] = decodeStrict[corev1.Service](t, obj)
		}
	}
	cases := map[string]struct {
		monitor, service, deployment, container, port string
	}{
		"qn-webhook's /metrics on its probe port":     {webhookName, webhookName, webhookName, "qn-webhook", "probe"},
		"qn-controller's /metrics on its own Service": {fullname + "-controller", fullname + "-controller-metrics", fullname + "-controller", "qn-controller", "metrics"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			sm := rel.Find("ServiceMonitor", c.monitor)
			if sm == nil {
				t.Fatalf("no ServiceMonitor %s; kinds %v", c.monitor, rel.Kinds())
			}
			if sm.GetLabels()["release"] != "kube-prometheus-stack" {
				t.Errorf("metrics.serviceMonitor.labels are not on the ServiceMonitor: %v", sm.GetLabels())
			}
			selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			namespaces, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
			if len(namespaces) != 1 || namespaces[0] != releaseNS {
				t.Errorf("namespaceSelector %v, want only %s", namespaces, releaseNS)
			}
			var selected []string
			for svcName, svc := range services {
				if matches(selector, svc.Labels) {
					selected = append(selected, svcName)
				}
			}
			if len(selected) != 1 || selected[0] != c.service {
				t.Fatalf("selector %v selects Services %v, want only %s", selector, selected, c.service)
			}
			endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != c.port || endpoints[0].(map[string]any)["path"] != "/metrics" {
				t.Fatalf("endpoints %v, want port %s path /metrics", endpoints, c.port)
			}
			svc := services[c.service]
			var target string
			for _, p := range svc.Spec.Ports {
				if p.Name == c.port {
					target = p.TargetPort.String()
				}
			}
			if target == "" {
				t.Fatalf("Service %s has no port %s", c.service, c.port)
			}
			pod := get[appsv1.Deployment](t, rel, "Deployment", c.deployment).Spec.Template
			if !matches(svc.Spec.Selector, pod.Labels) {
				t.Errorf("Service %s selects %v, the Pods are labelled %v", c.service, svc.Spec.Selector, pod.Labels)
			}
			found := false
			for _, p := range container(t, &pod.Spec, c.container).Ports {
				found = found || p.Name == target
			}
			if !found {
				t.Errorf("container %s has no port %s for the Service's target", c.container, target)
			}
		})
	}
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Every alert has a severity, a summary and a runbook whose section exists
// in docs/runbooks.md; the rules are exactly what test/alerts exercises.
func TestPrometheusRuleAlertsHaveRunbooksAndAreTested(t *testing.T) {
	rel := render(t, monitoringValues)
	rule := rel.Find("PrometheusRule", fullname)
	if rule == nil {
		t.Fatalf("no PrometheusRule; kinds %v", rel.Kinds())
	}
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	runbooks, err := os.ReadFile(filepath.Join(chartrender.Dir(), "..", "..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\w+)$`).FindAllStringSubmatch(string(runbooks), -1) {
		anchors[strings.ToLower(m[1])] = true
	}
	groups, _, _ := unstructured.NestedSlice(spec, "groups")
	alerts := 0
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			r := r.(map[string]any)
			if _, recording := r["record"]; recording {
				continue
			}
			name, _ := r["alert"].(string)
			alerts++
			labels, _ := r["labels"].(map[string]any)
			annotations, _ := r["annotations"].(map[string]any)
			if labels["severity"] == nil || annotations["summary"] == nil {
				t.Errorf("%s lacks a severity or a summary", name)
			}
			url, _ := annotations["runbook_url"].(string)
			_, anchor, _ := strings.Cut(url, "#")
			if anchor != strings.ToLower(name) || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q has no section ## %s in docs/runbooks.md", name, url, name)
			}
		}
	}
	if alerts < 12 {
		t.Errorf("%d alerts, want the issue's set (latency, errors, reloads, certificates, windows, replicas, ...)", alerts)
	}
	want, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_ALERTS_TESTDATA") == "1" {
		if err := os.WriteFile(alertsTestdata, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(alertsTestdata)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is not the chart's rules (%v): run UPDATE_ALERTS_TESTDATA=1 go test ./test/chart/ -run TestPrometheusRule, then make alerts-test", alertsTestdata, err)
	}
}

// The dashboard ConfigMap carries the sidecar's label and the dashboard
// file unchanged, which is valid JSON with a panel for each thing the
// issue names.
func TestDashboardConfigMap(t *testing.T) {
	rel := render(t, monitoringValues)
	cm := get[corev1.ConfigMap](t, rel, "ConfigMap", fullname+"-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("labels %v lack grafana_dashboard: \"1\"", cm.Labels)
	}
	file, err := os.ReadFile(filepath.Join(chartrender.Dir(), "..", "..", "charts", "qn-admission", "files", "dashboards", "qn-admission.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(cm.Data["qn-admission.json"]) != strings.TrimSpace(string(file)) {
		t.Errorf("the ConfigMap's dashboard differs from files/dashboards/qn-admission.json")
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(file, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	all := strings.ToLower(strings.Join(titles, "|"))
	for _, want := range []string{"by decision", "by role", "latency", "window usage", "revision per pod", "reload errors",
		"quantumnodes by phase", "audit verdict", "remediations and rollbacks", "unable to scale", "shadow"} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel about %q among %v", want, titles)
		}
	}
}
