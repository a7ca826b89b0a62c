// Package controller reconciles QuantumNodes after the admission webhook has
// let them in: it keeps the Service that exposes a node's declared services
// in the declared shape, checks the Kubernetes Node the QuantumNode runs on,
// and writes what it found to status through the status subresource.
//
// The status is a pure function of what the API server holds (computeStatus);
// the reconciler only gathers the inputs, makes the Service right and writes
// the result when it differs. No state lives outside the API server, so any
// replica that wins the leader election can take over at once.
package controller
