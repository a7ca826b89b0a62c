package cluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// podReport says what each Pod of the release is doing and its last
// events, for a failure message.
func (s *installed) podReport(ctx context.Context) string {
	var b strings.Builder
	pods, err := s.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "list pods: " + err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s/%s %s on %q", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " [%s ready=%v restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				fmt.Fprintf(&b, " last exit %d %s", t.ExitCode, t.Reason)
			}
			b.WriteString("]")
		}
		b.WriteString("\n")
		if p.Status.Phase != corev1.PodRunning {
			logs, _ := s.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr(int64(10))}).DoRaw(ctx)
			if len(logs) > 0 {
				fmt.Fprintf(&b, "  logs: %s\n", strings.ReplaceAll(strings.TrimSpace(string(logs)), "\n", "\n  logs: "))
			}
		}
	}
	events, err := s.Kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err == nil {
		items := events.Items
		if len(items) > 25 {
			items = items[len(items)-25:]
		}
		for _, e := range items {
			if e.Type != corev1.EventTypeNormal {
				fmt.Fprintf(&b, "event %s %s/%s: %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	return b.String()
}

func ptr[T any](v T) *T { return &v }

func dynamicFor(cfg *rest.Config) (dynamic.Interface, error) { return dynamic.NewForConfig(cfg) }
