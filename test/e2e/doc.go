// Package e2e drives qn-admission through a real kube-apiserver and etcd
// (started by controller-runtime's envtest from the binaries that
// hack/k8s-bins.sh builds), the real qn-webhook binary and the real kubectl;
// test/harness builds and starts them.
package e2e
