package cluster

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/quantumnode/qn-admission/test/harness/chartrender"
)

// helmConfig is Helm's action configuration for the release namespace:
// the code behind the helm CLI, against the suite's cluster.
func (s *installed) helmConfig() (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, ns := s.Kubeconfig, releaseNamespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, releaseNamespace, "secret", func(format string, v ...any) {}); err != nil {
		return nil, fmt.Errorf("helm configuration: %w", err)
	}
	return cfg, nil
}

// installValues are the chart's defaults but for what this machine cannot
// have: the images `make image` built (their tag, as README says) and the
// Redis image built here; and the serving certificate from a Secret
// instead of cert-manager, which does not build from the module proxy
// (its cmd/ modules are not served).
func (s *installed) installValues(caBundle string) map[string]any {
	return map[string]any{
		"webhook":    map[string]any{"image": map[string]any{"tag": s.Version}},
		"controller": map[string]any{"image": map[string]any{"tag": s.Version}},
		"windows": map[string]any{"redis": map[string]any{"bundled": map[string]any{
			"image": map[string]any{"repository": "qn.local/redis", "tag": "test"},
		}}},
		"certificates": map[string]any{"mode": "secret", "secret": map[string]any{"name": webhookSecretName, "caBundle": caBundle}},
	}
}

// install is `helm install --wait` of the checkout's chart.
func (s *installed) install(ctx context.Context) error {
	caBundle, err := s.webhookSecret(ctx)
	if err != nil {
		return err
	}
	cfg, err := s.helmConfig()
	if err != nil {
		return err
	}
	ch, err := loader.LoadDir(chartrender.Dir())
	if err != nil {
		return err
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = releaseName, releaseNamespace
	install.Wait, install.Timeout = true, 5*time.Minute
	rel, err := install.RunWithContext(ctx, ch, s.installValues(caBundle))
	if err != nil {
		return fmt.Errorf("helm install: %w\n%s", err, s.podReport(ctx))
	}
	if rel.Info.Status != release.StatusDeployed {
		return fmt.Errorf("helm install: release is %s", rel.Info.Status)
	}
	s.Notes = rel.Info.Notes
	return nil
}
