// Package harness builds, starts and stops the real binaries and the real
// control plane for the suites under test/ (e2e, load, soak, hostile,
// chart) and the tests of cmd/ and controller/ that need them: one way to
// build a binary as the Makefile does, to run it with its output kept for
// a failure's message, to start qn-webhook on free loopback ports and wait
// until it serves, to start qn-controller against a kubeconfig with its
// probes and metrics on free ports, to start kube-apiserver and etcd with
// the project's CRDs, and to wait for a condition instead of sleeping.
//
// It holds no suite's logic: what a load run measures stays in test/load,
// what a cluster test checks in test/e2e.
package harness
