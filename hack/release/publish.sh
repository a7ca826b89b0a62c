#!/usr/bin/env bash
# Publishes what `make release-artifacts` built: pushes each image's OCI
# layout to the registry its name says (the chart's), checks the registry
# stored the digest built here, signs it keylessly (Sigstore: the
# workflow's GitHub OIDC identity, recorded in the Rekor transparency log),
# attests each platform's SBOM, then pushes and signs the chart. Build
# provenance (SLSA) is the workflow's next job (slsa-github-generator).
#
#   publish.sh [--dry-run] IMAGE_DIR RELEASE_DIR CHART_REGISTRY
#
# --dry-run (make release-dry-run) prints every command with the real
# digests and runs none. Without it, crane, helm and cosign must be logged
# in to the registry (.github/workflows/release.yaml does this).
set -euo pipefail
dry_run=false
if [[ "${1:-}" == "--dry-run" ]]; then dry_run=true; shift; fi
images_dir="${1:?usage: publish.sh [--dry-run] IMAGE_DIR RELEASE_DIR CHART_REGISTRY}"
release_dir="${2:?}"
chart_registry="${3:?}"
here="$(dirname "$0")"

# run prints a command in dry-run mode and runs it otherwise.
run() {
  if $dry_run; then
    printf '  '; printf '%q ' "$@"; printf '\n'
  else
    "$@"
  fi
}

if $dry_run; then
  crane=crane helm=helm
  echo "dry run: the release workflow would run"
else
  crane="$("$here/tools.sh" crane)" helm="$("$here/tools.sh" helm)"
fi

jq -r '.[] | [.name, .repository, .tag, .digest, .layout] | @tsv' "$images_dir/images.json" |
while IFS=$'\t' read -r name repo tag digest layout; do
  echo "# $repo:$tag ($name), built as $digest"
  if $dry_run; then
    run "$crane" push --index "$images_dir/$layout" "$repo:$tag"
  else
    pushed="$("$crane" push --index "$images_dir/$layout" "$repo:$tag")"
    if [[ "$pushed" != "$repo@$digest" ]]; then
      echo "publish.sh: the registry stored $pushed, built here as $repo@$digest" >&2
      exit 1
    fi
  fi
  # --recursive signs the index and every platform's manifest.
  run cosign sign --yes --recursive "$repo@$digest"
  jq -r --arg n "$name" '.[] | select(.name == $n) | .platforms[] | [.platform, .digest] | @tsv' "$images_dir/images.json" |
  while IFS=$'\t' read -r platform pdigest; do
    sbom="$release_dir/sbom/${name}_$(cut -d/ -f1,2 <<<"$platform" | tr / _).spdx.json"
    [[ -f "$sbom" ]] || { echo "publish.sh: no SBOM $sbom" >&2; exit 1; }
    run cosign attest --yes --type spdxjson --predicate "$sbom" "$repo@$pdigest"
  done
done

charts=("$release_dir"/qn-admission-*.tgz)
[[ ${#charts[@]} -eq 1 && -f "${charts[0]}" ]] || { echo "publish.sh: want one packaged chart in $release_dir, found ${charts[*]}" >&2; exit 1; }
chart="${charts[0]}"
echo "# the chart $chart, pinned to the digests above"
if $dry_run; then
  run "$helm" push "$chart" "$chart_registry"
  echo "  cosign sign --yes ${chart_registry#oci://}/qn-admission@<the digest helm push prints>"
else
  out="$("$helm" push "$chart" "$chart_registry" 2>&1)"
  echo "$out"
  chart_digest="$(sed -n 's/^Digest: *//p' <<<"$out")"
  [[ "$chart_digest" == sha256:* ]] || { echo "publish.sh: helm push printed no digest" >&2; exit 1; }
  run cosign sign --yes "${chart_registry#oci://}/qn-admission@$chart_digest"
fi
echo "# the checksums of the GitHub release's files, signed"
run cosign sign-blob --yes --bundle "$release_dir/SHA256SUMS.sigstore.json" "$release_dir/SHA256SUMS"
if $dry_run; then
  echo "then SLSA provenance for each image digest above (slsa-github-generator), and a GitHub release with"
  (cd "$release_dir" && printf '  %s\n' qn-admission-*.tgz images.json SHA256SUMS SHA256SUMS.sigstore.json sbom/*.json)
fi
