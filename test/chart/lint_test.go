package chart

import (
	"github.com/quantumnode/qn-admission/test/harness/chartrender"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// `helm lint --strict` passes: the same linter (helm.sh/helm/v3/pkg/lint)
// run in-process on the chart directory, for the default values and the
// variations, with warnings counted as failures.
func TestHelmLintStrict(t *testing.T) {
	kube := &chartutil.KubeVersion{Version: chartrender.KubeVersion, Major: "1", Minor: "36"}
	cases := map[string]string{"default values": ""}
	for name, v := range variations {
		cases[name] = v.values
	}
	for name, snippet := range cases {
		t.Run(name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(chartrender.Dir(), values(t, snippet), releaseNS, kube)
			for _, msg := range linter.Messages {
				if msg.Severity >= support.WarningSev {
					t.Error(msg.Error())
				} else {
					t.Log(msg.Error())
				}
			}
		})
	}
}
