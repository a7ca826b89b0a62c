#!/usr/bin/env bash
# Runs one Go fuzz target with coverage instrumentation on this module's
# packages only.
#
# `go test -fuzz` instruments every package the test links, the standard
# library included. For a target that links OPA and client-go, the fuzzing
# worker then clears, copies and scans counters for all of that code around
# each execution, which costs more than most targets themselves: in one
# minute on the same two cores and corpus, FuzzParseRoleTable ran 92,927
# executions that way and 1,283,961 this way. Guidance then
# comes from this module's branches only (ours are what the targets hold to
# a property; the libraries under them are fuzzed by their own projects), so
# long runs use this and short runs keep go test's default.
#
# The corpus is go test's own cache directory, so inputs found either way
# seed the other; a failing input is written to the package's
# testdata/fuzz/<target>/ as go test writes it.
#
# usage: hack/fuzz-module.sh <package> <FuzzTarget> <fuzztime>
set -euo pipefail

if [[ $# -ne 3 ]]; then
	echo "usage: $0 <package> <FuzzTarget> <fuzztime>" >&2
	exit 2
fi
pkg=$1 target=$2 fuzztime=$3
go=${GO:-go}

module=$($go list -m)
importpath=$($go list "$pkg")
pkgdir=$($go list -f '{{.Dir}}' "$pkg")
# go test -c links anew on every call, so the binary (tens of MB) is not
# kept; one per target lets targets of one package run side by side.
bindir=$(cd "$(dirname "$0")/.." && pwd)/bin/fuzz
mkdir -p "$bindir"
testbin=$bindir/$(basename "$importpath").$target.test
trap 'rm -f "$testbin"' EXIT

$go test -c -o "$testbin" -gcflags="$module/...=-d=libfuzzer" "$pkg"
cd "$pkgdir"
"$testbin" -test.run XXX -test.fuzz "^$target\$" -test.fuzztime "$fuzztime" \
	-test.fuzzminimizetime 2s -test.fuzzcachedir "$($go env GOCACHE)/fuzz/$importpath"
