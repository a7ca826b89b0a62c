package vap

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quantumnode/qn-admission/test/harness"
)

// With qn-webhook stopped and registered with failurePolicy Ignore, the API
// server admits whatever the webhook would have judged: only its own rules
// hold. The compiled policy and the CRD's rules keep the core promises.
func TestWithTheWebhookDownTheCorePromisesHold(t *testing.T) {
	waitForPolicy(t)
	ctx := context.Background()
	if err := cluster.StartControllerManager(); err != nil {
		t.Fatalf("%v\n%s", err, cluster.ControllerManagerLogs())
	}
	doomed := "doomed"
	if _, err := cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomed}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Stored while the webhook is up.
	for ns, objs := range map[string][]*unstructured.Unstructured{
		namespace: {batch("down-batch"), realtime("down-rt"), qn("down-plain", nil, nil), qn("down-move", nil, nil), qn("down-move-batch", nil, nil)},
		doomed:    {realtime("rt"), batch("batch"), qn("plain", nil, nil)},
	} {
		for _, o := range objs {
			if _, err := nodes(cluster.Dynamic, ns).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s/%s: %v", ns, o.GetName(), err)
			}
		}
	}

	// A realtime node owned by a ConfigMap, for the garbage collector.
	owner, err := cluster.Kube.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "down-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := realtime("down-owned")
	owned.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}})
	if _, err := nodes(cluster.Dynamic, namespace).Create(ctx, owned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	stopWebhook(t)
	// The webhook is down: a write the policy does not judge goes through,
	// so the webhook configuration is demonstrably failing open.
	harness.WaitFor(t, 30*time.Second, "the API server to fail open on the stopped webhook", func() error {
		o := qn("down-unjudged", nil, nil)
		got, err := nodes(cluster.Dynamic, namespace).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if _, labelled := got.GetLabels()["qn.dev/managed-by"]; labelled {
			return fmt.Errorf("the mutating webhook still answers")
		}
		return nil
	})

	bob := as(t, "bob", "qn:developers")
	tests := []struct {
		name string
		do   func() error
		// want is the refusal; empty: admitted.
		want   string
		policy bool // refused by the policy; else by the CRD
	}{{
		name: "a batch node that drops its role is still refused",
		do: func() error {
			o, err := nodes(bob, namespace).Get(ctx, "down-batch", metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.SetAnnotations(nil)
			_, err = nodes(bob, namespace).Update(ctx, o, metav1.UpdateOptions{})
			return err
		},
		want:   `the stored QuantumNode is under role "batch", which may not update it (it may CREATE); removing or changing the qn-role annotation does not change the role that judges an update`,
		policy: true,
	}, {
		name: "a realtime node that changes its role to default is still refused",
		do: func() error {
			o, err := nodes(bob, namespace).Get(ctx, "down-rt", metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.SetAnnotations(map[string]string{"qn-role": "default"})
			_, err = nodes(bob, namespace).Update(ctx, o, metav1.UpdateOptions{})
			return err
		},
		want:   `the stored QuantumNode is under role "realtime", which does not let it move to role "default" (roles.realtime.moveTo lists none)`,
		policy: true,
	}, {
		name:   "a developer still cannot delete a realtime node",
		do:     func() error { return nodes(bob, namespace).Delete(ctx, "down-rt", metav1.DeleteOptions{}) },
		want:   `user "bob" (groups qn:developers, system:authenticated) may not delete a QuantumNode of role "realtime": roles.realtime.delete admits groups system:masters`,
		policy: true,
	}, {
		name: "a realtime node outside the allowed zones is still refused",
		do: func() error {
			o := realtime("down-eu")
			o.SetLabels(map[string]string{"topology.kubernetes.io/zone": "eu-west-1"})
			_, err := nodes(bob, namespace).Create(ctx, o, metav1.CreateOptions{})
			return err
		},
		want:   `denied by qn-admission (role "realtime"): label topology.kubernetes.io/zone must be "cn-shanghai" (found "eu-west-1") [qn.roles.realtime: roles.realtime.parameters.allowedZones]`,
		policy: true,
	}, {
		name: "a realtime node over its latency budget is still refused",
		do: func() error {
			o := realtime("down-slow")
			o.SetAnnotations(map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "80"})
			_, err := nodes(bob, namespace).Create(ctx, o, metav1.CreateOptions{})
			return err
		},
		want:   `denied by qn-admission (role "realtime"): annotation qn.dev/latency-budget-ms must be a number below 50 (found "80")`,
		policy: true,
	}, {
		name: "a default node may not move to a role its moveTo does not list",
		do: func() error {
			o, err := nodes(bob, namespace).Get(ctx, "down-move-batch", metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.SetAnnotations(map[string]string{"qn-role": "batch"})
			o.SetLabels(map[string]string{"priority": "low"})
			_, err = nodes(bob, namespace).Update(ctx, o, metav1.UpdateOptions{})
			return err
		},
		want:   `the stored QuantumNode is under role "default", which does not let it move to role "batch" (roles.default.moveTo allows only realtime)`,
		policy: true,
	}, {
		name: "a default node moving to realtime meets realtime's conditions",
		do: func() error {
			o, err := nodes(bob, namespace).Get(ctx, "down-move", metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.SetAnnotations(map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "20"})
			o.SetLabels(map[string]string{"topology.kubernetes.io/zone": "eu-west-1"})
			_, err = nodes(bob, namespace).Update(ctx, o, metav1.UpdateOptions{})
			return err
		},
		want:   `label topology.kubernetes.io/zone must be "cn-shanghai" (found "eu-west-1")`,
		policy: true,
	}, {
		name: "a default node moves to realtime in an allowed zone",
		do: func() error {
			o, err := nodes(bob, namespace).Get(ctx, "down-move", metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.SetAnnotations(map[string]string{"qn-role": "realtime", "qn.dev/latency-budget-ms": "20"})
			o.SetLabels(map[string]string{"topology.kubernetes.io/zone": "cn-shanghai"})
			_, err = nodes(bob, namespace).Update(ctx, o, metav1.UpdateOptions{})
			return err
		},
	}, {
		name:   "a developer still cannot delete a batch node",
		do:     func() error { return nodes(bob, namespace).Delete(ctx, "down-batch", metav1.DeleteOptions{}) },
		want:   `user "bob" (groups qn:developers, system:authenticated) may not delete a QuantumNode of role "batch"`,
		policy: true,
	}, {
		name: "a batch node of another priority is still refused",
		do: func() error {
			o := batch("down-high")
			o.SetLabels(map[string]string{"priority": "high"})
			_, err := nodes(bob, namespace).Create(ctx, o, metav1.CreateOptions{})
			return err
		},
		want:   `denied by qn-admission (role "batch"): label priority must be "low" (found "high")`,
		policy: true,
	}, {
		name: "a duplicate port is refused by the CRD rule, with the field path",
		do: func() error {
			o := qn("down-dup", nil, nil)
			o.Object["spec"].(map[string]any)["services"] = []any{
				map[string]any{"name": "mqtt", "port": int64(8883)}, map[string]any{"name": "mqtts", "port": int64(8883)}}
			_, err := nodes(bob, namespace).Create(ctx, o, metav1.CreateOptions{})
			return err
		},
		want: `spec.services: Invalid value: services "mqtt" and "mqtts" declare the same port; each service needs its own port`,
	}, {
		name: "changing the architecture is refused by the CRD rule",
		do: func() error {
			o, err := nodes(bob, namespace).Get(ctx, "down-plain", metav1.GetOptions{})
			if err != nil {
				return err
			}
			o.Object["spec"].(map[string]any)["hardware"] = map[string]any{"arch": "amd64"}
			_, err = nodes(bob, namespace).Update(ctx, o, metav1.UpdateOptions{})
			return err
		},
		want: `spec.hardware.arch: Invalid value: "amd64": spec.hardware.arch is immutable`,
	}, {
		name: "a node under a role nobody declared is still refused",
		do: func() error {
			_, err := nodes(bob, namespace).Create(ctx, qn("down-turbo", map[string]string{"qn-role": "turbo"}, nil), metav1.CreateOptions{})
			return err
		},
		want:   `annotation qn-role="turbo" names no known role; known roles: batch, default, realtime`,
		policy: true,
	}, {
		name: "a cluster admin still deletes a realtime node",
		do: func() error {
			return nodes(as(t, "root", "system:masters"), namespace).Delete(ctx, "down-rt", metav1.DeleteOptions{})
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want it admitted, got %v", err)
			case tt.want == "":
			case tt.policy && !policyRefused(err, tt.want):
				t.Fatalf("want the policy's refusal %q, got %v", tt.want, err)
			case !tt.policy && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("want the CRD's refusal %q, got %v", tt.want, err)
			default:
				t.Logf("refused: %v", err)
			}
		})
	}

	// The garbage collector still deletes a realtime node whose owner is
	// gone (a developer may not: above).
	background := metav1.DeletePropagationBackground
	if err := cluster.Kube.CoreV1().ConfigMaps(namespace).Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 90*time.Second, "the garbage collector to delete the owned realtime node", func() error {
		_, err := nodes(cluster.Dynamic, namespace).Get(ctx, "down-owned", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the owned realtime node is still there (%v)\n%s", err, cluster.ControllerManagerLogs())
	})

	// The namespace controller still deletes every node of a namespace
	// being deleted, realtime and batch ones too.
	start := time.Now()
	if err := cluster.Kube.CoreV1().Namespaces().Delete(ctx, doomed, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 120*time.Second, "the namespace with realtime, batch and default nodes to finish deleting", func() error {
		ns, err := cluster.Kube.CoreV1().Namespaces().Get(ctx, doomed, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("namespace %s is %s: %+v\n%s", doomed, ns.Status.Phase, ns.Status.Conditions, cluster.ControllerManagerLogs())
	})
	t.Logf("namespace %s deleted in %s with the webhook down", doomed, time.Since(start).Round(time.Millisecond))
}
