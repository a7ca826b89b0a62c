#!/usr/bin/env bash
# Prints the path of one of the release's pinned tools, building it once
# from the Go module proxy (go install verifies it against the checksum
# database) into a cache directory outside the source tree, as
# hack/k8s-bins.sh does for the Kubernetes binaries. A warm cache answers
# at once.
#
#   syft   SBOMs of the images (SPDX), offline, from their OCI layouts
#   helm   lints, packages and renders the pinned chart; pushes it to the registry
#   crane  pushes the OCI layouts to the registry (go-containerregistry's CLI,
#          the library hack/release builds the images with)
#
# The release workflow (.github/workflows/release.yaml) uses the same
# script, so a dry run here and the release run the same tool versions.
set -euo pipefail

name="${1:?usage: tools.sh syft|helm|crane}"
case "$name" in
  syft)  pkg=github.com/anchore/syft/cmd/syft; version=v1.57.1
         ldflags="-X main.version=${version#v}" ;;
  helm)  pkg=helm.sh/helm/v3/cmd/helm; version=v3.21.4
         ldflags="-X helm.sh/helm/v3/internal/version.version=$version" ;;
  crane) pkg=github.com/google/go-containerregistry/cmd/crane; version=v0.22.1
         ldflags="" ;;
  *) echo "tools.sh: no tool $name; known: syft, helm, crane" >&2; exit 2 ;;
esac

CACHE_ROOT="${QN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/qn-admission}"
out="$CACHE_ROOT/tools/$name-$version"
if [[ ! -x "$out/$name" ]]; then
  echo "tools.sh: building $name $version into $out (once; syft takes minutes)" >&2
  tmp="$(mktemp -d "$CACHE_ROOT/tools/.$name.XXXXXX" 2>/dev/null || { mkdir -p "$CACHE_ROOT/tools" && mktemp -d "$CACHE_ROOT/tools/.$name.XXXXXX"; })"
  trap 'rm -rf "$tmp"' EXIT
  GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "$pkg@$version" >&2
  mkdir -p "$out"
  mv "$tmp/$name" "$out/$name"
fi
echo "$out/$name"
