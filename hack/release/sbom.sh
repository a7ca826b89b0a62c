#!/usr/bin/env bash
# Writes an SPDX SBOM of every platform image of every layout `make image`
# wrote, offline, with syft (hack/release/tools.sh): syft reads the layout
# as a registry would serve it and catalogs the Go modules compiled into
# each binary (their versions and go.sum hashes) and the image's files.
#   sbom.sh IMAGE_DIR OUT_DIR   ->  OUT_DIR/<image>_<os>_<arch>.spdx.json
set -euo pipefail
images_dir="${1:?usage: sbom.sh IMAGE_DIR OUT_DIR}"
out="${2:?usage: sbom.sh IMAGE_DIR OUT_DIR}"
syft="$("$(dirname "$0")/tools.sh" syft)"
export SYFT_CHECK_FOR_APP_UPDATE=false

jq -r '.[] | .name as $n | .repository as $r | .tag as $t | .layout as $l | .platforms[] | [$n, $r, $t, $l, .platform, .digest] | @tsv' \
  "$images_dir/images.json" |
while IFS=$'\t' read -r name repo tag layout platform digest; do
  os_arch="$(cut -d/ -f1,2 <<<"$platform" | tr / _)"
  file="$out/${name}_${os_arch}.spdx.json"
  "$syft" scan "oci-dir:$images_dir/$layout" --platform "$platform" \
    --source-name "$repo" --source-version "$tag" -q -o "spdx-json=$file"
  # Go records no version for the main module of a -buildvcs=false build
  # (the Makefile's choice, for reproducibility), so syft says UNKNOWN;
  # the release knows it.
  jq --arg v "v$tag" '(.packages[] | select(.name == "github.com/quantumnode/qn-admission")) |=
      (.versionInfo = $v | .externalRefs |= map(
        if .referenceType == "purl" then .referenceLocator = "pkg:golang/github.com/quantumnode/qn-admission@" + $v
        elif .referenceType == "cpe23Type" then .referenceLocator |= sub(":\\*:\\*:\\*:\\*:\\*:\\*:\\*:\\*$"; ":" + $v + ":*:*:*:*:*:*:*")
        else . end))' "$file" > "$file.tmp"
  mv "$file.tmp" "$file"
  # The SBOM must describe this platform's image: syft names it by its
  # manifest digest.
  if ! grep -q "${digest#sha256:}" "$file"; then
    echo "sbom.sh: $file does not name $repo@$digest ($platform)" >&2
    exit 1
  fi
  echo "$file: $(jq '.packages | length' "$file") packages of $repo@$digest ($platform)"
done
