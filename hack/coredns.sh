#!/usr/bin/env bash
# Builds CoreDNS at a pinned version from the Go module proxy into the same
# cache as the kube binaries (hack/k8s-bins.sh), and prints the binary's path.
# A warm cache returns at once.
#
# The one-node cluster of test/cluster resolves Service names (the chart's
# bundled Redis) through it, as a cluster's DNS does. Only the plugins that
# cluster uses are linked (bind, errors, kubernetes, ready): CoreDNS's own
# plugin list pulls every cloud SDK its other plugins need. A plugin is in
# when its package is imported; coremain.Run is CoreDNS's own main.
set -euo pipefail

COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
CACHE_ROOT="${QN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/qn-admission}"
OUT="$CACHE_ROOT/coredns/$COREDNS_VERSION"
BIN="$OUT/coredns"

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

log() { echo "coredns: $*" >&2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/qn-coredns-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "building coredns $COREDNS_VERSION (bind, errors, kubernetes, ready) into $OUT"
mkdir -p "$OUT"
cd "$work"
go mod init qn.local/coredns >/dev/null 2>&1
cat > main.go <<'GO'
// Command coredns is CoreDNS with the plugins a one-node test cluster needs.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
GO
# only to say that no generated plugin list is used).
GOFLAGS= go get "github.com/coredns/coredns@$COREDNS_VERSION" >/dev/null 2>&1
GOFLAGS= go mod tidy >/dev/null 2>&1
GOFLAGS= CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/.coredns.partial" .
mv "$OUT/.coredns.partial" "$BIN"
log "done: $("$BIN" -version 2>&1 | head -1)"
echo "$BIN"
