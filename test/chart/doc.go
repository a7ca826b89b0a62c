// Package chart tests the Helm chart in charts/qn-admission: it renders the
// chart with Helm's own packages (the code behind `helm template` and
// `helm lint`), checks the fail-safe properties of what comes out, and has a
// real kube-apiserver validate every rendered object with a server-side dry
// run, cert-manager's CRDs installed.
//
// The chart keeps three copies it must not edit by hand, the project's CRDs
// (crds/), the bundled policies (files/policies/) and qnctl vap's output
// for them (files/admission-policy.yaml); the tests fail when they differ
// from their sources, and this refreshes them:
//
//go:generate sh -c "go run -tags nomsgpack ../../cmd/qnctl vap > ../../charts/qn-admission/files/admission-policy.yaml"
//go:generate sh -c "cp ../../config/crd/qn.dev_quantumnodes.yaml ../../config/crd/qn.dev_quantumnodehealthpolicies.yaml ../../config/crd/qn.dev_horizontalqnscalers.yaml ../../config/crd/qn.dev_quantumnoderoletables.yaml ../../charts/qn-admission/crds/ && rm -rf ../../charts/qn-admission/files/policies && mkdir -p ../../charts/qn-admission/files/policies && cp ../../rego/bundle/* ../../charts/qn-admission/files/policies/"
package chart
