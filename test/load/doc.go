// Package load measures admission webhooks over HTTPS the way kube-apiserver
// calls them: AdmissionReview v1 bodies on keep-alive HTTP/1.1 connections,
// a fresh request.uid per request, and every answer checked for being a
// correct AdmissionReview.
//
// It compares three targets on the same machine in the same run, in
// alternating slices so a noisy machine affects all alike: qn-webhook with
// the bundled policies, the OPA server running the same QuantumNode rules
// the way OPA's Kubernetes admission tutorial writes them, and a bare-TLS
// ceiling server that decodes the review and admits it. qn-webhook also
// runs with a shadow policy set (--shadow-policy-dir), in the same rounds
// as without one, so the report shows what a shadow costs the served
// answers and what share of the requests it judged and dropped.
//
// Two modes: a closed loop (fixed concurrency; throughput) and an open loop
// (fixed arrival rate; latency measured from the intended send time, so a
// stalled server cannot hide its stall). Server CPU time and RSS come from
// /proc. cmd/qnload runs the comparison and rewrites the load section of
// docs/benchmarks.md; the smoke test runs a few hundred requests of each
// kind against the real binaries in `go test`, and the shadow test checks
// that a shadow counts the disagreements of a crafted mix exactly.
package load
