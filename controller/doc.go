// Package controller holds what qn-controller's controllers share: the
// scheme and the cache's trimming, the name every write and event is made
// under, the field indexes more than one of them reads, the gauge counted
// from the cache, the effects a step of the QuantumNode reconcile hands
// back, and the RBAC markers of the whole process. Each concern is a room
// of its own below it, imported by cmd/qn-controller/app, never by this
// package:
//
//   - controller/quantumnode: the one QuantumNode reconcile: the owned
//     Service, the Node, the status (phase, conditions, observedGeneration),
//     quiescence, and the one status write each reconcile makes, with the
//     steps below run inside it;
//   - controller/audit: the background audit's step (PolicyCompliant), the
//     sweeper that re-audits on a policy change, and the PolicyReports;
//   - controller/selfheal: the health step (health, the remediation ladder
//     and its guards) and the health policies' status, over
//     controller/health (the pure state machine) and controller/remediation
//     (the effects of each step and the guards' books);
//   - controller/rollout: the spec history as ControllerRevisions and the
//     rollout's step: following a revision to Ready, keeping the revisions,
//     applying and recording a rollback (and `qnctl rollout`'s undo);
//   - controller/roletable: the ValidatingAdmissionPolicy's parameters kept
//     in step with the served role table;
//   - controller/scaler: the HorizontalQNScaler controller.
//
// Imports point one way: a room may import this package and the leaves
// (health, remediation, rollout), quantumnode imports the steps it runs;
// this package imports none of them. No state lives outside the API
// server, so any replica that wins the leader election can take over at
// once.
package controller
