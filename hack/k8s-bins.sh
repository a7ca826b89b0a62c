#!/usr/bin/env bash
# Builds kube-apiserver, etcd and kubectl at a pinned version from the Go module
# proxy into a cache directory outside the source tree, and prints that
# directory (usable as KUBEBUILDER_ASSETS). A warm cache returns at once.
#
# Why a scratch module: `go install k8s.io/kubernetes/cmd/...@vX` is refused
# because k8s.io/kubernetes carries replace directives for its staging modules.
# A module that requires k8s.io/kubernetes and pins every staging module to the
# matching v0.X.Y builds it. The staging list is generated from kubernetes' own
# go.mod (modules both required at v0.0.0 and replaced by ./staging/...).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
CACHE_ROOT="${QN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/qn-admission}"
OUT="$CACHE_ROOT/k8s/$K8S_VERSION"

# kube-controller-manager runs the namespace controller and the garbage
# collector for the tests that delete namespaces and cascade owners;
# kube-scheduler, kubelet and kube-proxy make the one-node cluster on which
# test/cluster runs the chart and our images as Pods (about 47 CPU-seconds
# more once kube-apiserver's packages are in the build cache).
BINARIES=(kube-apiserver etcd kubectl kube-controller-manager kube-scheduler kubelet kube-proxy)
missing=()
for b in "${BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || missing+=("$b"); done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$OUT"
  exit 0
fi

log() { echo "k8s-bins: $*" >&2; }
staging_minor="v0.${K8S_VERSION#v1.}"   # v1.36.3 -> v0.36.3
work="$(mktemp -d "${TMPDIR:-/tmp}/qn-k8s-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "building ${missing[*]} $K8S_VERSION into $OUT (cold build: ~10 min)"
cd "$work"
go mod init qn.local/k8sbins >/dev/null 2>&1

gomod="$(go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@$K8S_VERSION")"
[[ -f "$gomod" ]] || { log "cannot read go.mod of k8s.io/kubernetes@$K8S_VERSION"; exit 1; }

# Staging modules: required at v0.0.0 AND replaced by ./staging/src/...
required="$(awk '/^require[[:space:]]*\(/{r=1;next} r&&/^\)/{r=0} r&&$2=="v0.0.0"{print $1} /^require [^(]/&&$3=="v0.0.0"{print $2}' "$gomod" | sort -u)"
replaced="$(awk '/=>[[:space:]]*\.\/staging\// {for(i=2;i<=NF;i++) if($i=="=>"){print $(i-1); break}}' "$gomod" | sort -u)"
staging="$(comm -12 <(echo "$required") <(echo "$replaced"))"
count="$(echo "$staging" | grep -c . || true)"
[[ "$count" -gt 10 ]] || { log "found only $count staging modules in $gomod; refusing to continue"; exit 1; }
log "pinning $count staging modules to $staging_minor"

{
  echo "require k8s.io/kubernetes $K8S_VERSION"
  for m in $staging; do echo "replace $m => $m $staging_minor"; done
} >> go.mod

cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO

minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
mkdir -p "$OUT"
go mod tidy -e >/dev/null 2>&1 || true
# Only what is missing is built; each binary lands by rename, so an
# interrupted build never leaves a half-written one in the cache.
for b in "${missing[@]}"; do
  case "$b" in
    etcd) pkg=go.etcd.io/etcd/server/v3; flags="-s -w" ;;
    *) pkg="k8s.io/kubernetes/cmd/$b"; flags="$ldflags" ;;
  esac
  log "building $b"
  go build -mod=mod -trimpath -ldflags "$flags" -o "$OUT/.$b.partial" "$pkg"
  mv "$OUT/.$b.partial" "$OUT/$b"
done
log "done: $("$OUT/kube-apiserver" --version 2>&1)"
echo "$OUT"
