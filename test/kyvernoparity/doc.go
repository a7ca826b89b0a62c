// Package kyvernoparity holds qn-admission's Kyverno ClusterPolicy and
// Policy evaluator, and its ValidatingPolicies and ValidatingAdmissionPolicies,
// to Kyverno's own answers. It is a module of its own
// because Kyverno's engine (github.com/kyverno/kyverno/pkg/engine) does
// not build against the main module's Kubernetes libraries and would pull
// its image-signing and cloud SDKs into our binaries; and it does not
// import the main module (its Kubernetes versions would be forced on
// Kyverno): it runs the qnctl binary, built from the repository in
// TestMain.
//
// For each Kyverno test folder of qnctl's fixtures
// (cmd/qnctl/app/testdata/kyverno), Kyverno's engine, set up as its CLI
// sets it up offline, judges every (policy, resource) pair under CREATE,
// UPDATE and DELETE. The tests check that the folder's committed
// kyverno-test.yaml agrees with those verdicts, then write them as the
// rows of a generated kyverno-test.yaml (plus a row for every rule that
// does not apply, which qnctl must call excluded) and run `qnctl test` on
// it: any disagreement fails with the row. The ValidatingPolicies and
// ValidatingAdmissionPolicies of the fixtures are judged the same way by
// Kyverno's CEL engine (pkg/cel/policies/vpol, pkg/admissionpolicy), as
// its CLI judges them: one verdict per policy and resource. Kyverno's own
// CLI test folders (its module's test/cli/test, test-validating-policy
// and test-validating-admission-policy) run through qnctl too: each
// either loads and agrees row for row, or is refused at load with the
// reason.
//
// Run it with `make kyverno-parity` (or `cd test/kyvernoparity && go test
// ./...`).
package kyvernoparity
