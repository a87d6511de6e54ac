#!/usr/bin/env bash
# Builds cert-manager's controller and cainjector from the wrapper module in gowrap/ (our own
# `main`s over the github.com/cert-manager/cert-manager module), and copies the module's CRDs
# next to them, into a cache directory keyed by (cert-manager version, Go version, hash of the
# wrapper's go.mod, go.sum and mains). A warm cache means no build at all.
#
# Progress goes to stderr; the last line of stdout is the bin directory. The CRDs land in
# <bin>/../crds/ exactly as the module ships them (Helm-templated labels and all); the Python side
# (devplatform/certmanager) rewrites them before applying.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../gobuild.sh
. "$here/../gobuild.sh"
wrap="$here/gowrap"
components="cert-manager-controller cert-manager-cainjector"
module="github.com/cert-manager/cert-manager"

cmver=$(tr -d '[:space:]' < "$wrap/cmversion.txt")
if ! grep -q "^[[:space:]]*$module $cmver\$" "$wrap/go.mod"; then
  echo "cert-manager: gowrap/go.mod does not require $module $cmver (cmversion.txt); run go get $module@$cmver" >&2
  exit 1
fi
gover=$(GOTOOLCHAIN=local go env GOVERSION)
# Relative names: the key must not depend on where the checkout lives (CI clones elsewhere).
sumhash=$(cd "$wrap" && sha256sum go.sum go.mod cmd/*/main.go | sha256sum | cut -c1-12)
cache_root="${NIMBIX_BURST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbix-burst}"
root="$cache_root/certmanager/$cmver-$gover-$sumhash"
bin="$root/bin"

complete=1
for c in $components; do [[ -x "$bin/$c" ]] || complete=0; done
compgen -G "$root/crds/*.yaml" >/dev/null || complete=0
if [[ $complete == 1 ]]; then
  echo "cert-manager $cmver: reusing cached binaries in $bin" >&2
  echo "$bin"
  exit 0
fi

echo "cert-manager $cmver: cold build with $gover into $root" >&2
echo "  (first build downloads modules and compiles ~1.5k packages: about 4-6 min on 2 cores)" >&2
tmp="$root.tmp.$$"
mkdir -p "$tmp/bin" "$tmp/crds"
trap 'rm -rf "$tmp"' EXIT
log="$tmp/build.log"
start=$(date +%s)

# The CRDs ship in the module zip; `go mod download` puts it in the module cache (read-only).
moddir=$(cd "$wrap" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "$module@$cmver" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$moddir" || ! -d "$moddir/deploy/crds" ]]; then
  echo "cert-manager $cmver: no deploy/crds in the module download ($moddir)" >&2
  exit 1
fi
cp "$moddir"/deploy/crds/*.yaml "$tmp/crds/"
chmod u+w "$tmp"/crds/*.yaml

go_build_with_progress "$components" "cert-manager" "$start" "$log" "$wrap" -ldflags "-s -w" -o "$tmp/bin/" ./cmd/... || exit 1
rm -rf "$root"
mv "$tmp" "$root"
trap - EXIT
echo "cert-manager $cmver: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
