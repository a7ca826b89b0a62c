#!/usr/bin/env bash
# Builds the Prometheus server at a pinned version from the Go module proxy
# into the same cache as the kube binaries (hack/k8s-bins.sh), and prints the
# binary's path. A warm cache returns at once.
#
# `go install github.com/prometheus/prometheus/cmd/prometheus@vX` works as is
# (the module has no replace directives). The binary has no web UI assets
# (those need the builtinassets tag and a Node build); the HTTP API, the TSDB
# and scraping, which the tests use, are complete.
#
# The remove_all_sd tag leaves out every service discovery but static, file
# and http (the tests scrape static targets): the cloud SDKs and client-go
# they pull in were two thirds of a cold build (575 CPU-seconds with them,
# 194 without; the binary 105 -> 52 MB). The cache directory names the
# flavour, so a cache holding the full build is not mistaken for this one.
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
CACHE_ROOT="${QN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/qn-admission}"
PROMETHEUS_TAGS="remove_all_sd"
OUT="$CACHE_ROOT/prometheus/$PROMETHEUS_VERSION-static-sd"
BIN="$OUT/prometheus"

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

log() { echo "prometheus: $*" >&2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/qn-prometheus-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "building prometheus $PROMETHEUS_VERSION ($PROMETHEUS_TAGS) into $OUT (cold build: ~2-4 min on 2 cores)"
mkdir -p "$OUT"
# GOBIN in a scratch directory, then a rename: an interrupted build never
# leaves a half-written binary in the cache. GOFLAGS from the caller (for
# example -mod=vendor) must not reach a build outside this module.
GOFLAGS=-trimpath GOBIN="$work" go install -tags "$PROMETHEUS_TAGS" -ldflags "-s -w \
  -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}" \
  "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
mv "$work/prometheus" "$OUT/.prometheus.partial"
mv "$OUT/.prometheus.partial" "$BIN"
log "done: $("$BIN" --version 2>&1 | head -1)"
echo "$BIN"
