#!/usr/bin/env bash
# Checks a packaged chart the way a user meets it: `helm show chart` names
# the release in version and appVersion, and `helm template` with default
# values runs every image of the release by the digest it was built with.
#   check-chart.sh HELM CHART.tgz IMAGES.json KUBE_VERSION
set -euo pipefail
helm="${1:?usage: check-chart.sh HELM CHART.tgz IMAGES.json KUBE_VERSION}"
chart="${2:?}"
images="${3:?}"
kube_version="${4:?}"

version="$(jq -r '.[0].tag' "$images")"
meta="$("$helm" show chart "$chart")"
for key in version appVersion; do
  got="$(sed -n "s/^$key: *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" <<<"$meta")"
  if [[ "$got" != "$version" ]]; then
    echo "check-chart.sh: $chart has $key $got, the images are $version" >&2
    exit 1
  fi
done

rendered="$("$helm" template qn-admission "$chart" --namespace qn-system --kube-version "$kube_version")"
for name in qn-webhook qn-controller; do
  ref="$(jq -r --arg n "$name" '.[] | select(.name == $n) | .repository + "@" + .digest' "$images")"
  if ! grep -q "image: $ref\$" <<<"$rendered"; then
    echo "check-chart.sh: helm template $chart does not run $ref; it runs:" >&2
    grep 'image:' <<<"$rendered" >&2
    exit 1
  fi
  echo "$chart runs $ref"
done
