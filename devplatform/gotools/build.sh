#!/usr/bin/env bash
# Builds one Go command-line tool (helm) from its upstream Go module, through the
# wrapper module in <tool>/ (a go.mod whose `tool` directive names the command and whose go.sum
# pins every dependency), into a cache directory keyed by (tool version, Go version, hash of the
# wrapper's go.mod and go.sum). A warm cache means no build at all.
#
# Usage: build.sh helm
# Progress goes to stderr; the last line of stdout is the binary's path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../gobuild.sh
. "$here/../gobuild.sh"
tool="${1:?usage: build.sh helm}"
wrap="$here/$tool"
if [[ ! -f "$wrap/go.mod" || ! -f "$wrap/version.txt" ]]; then
  echo "gotools: no wrapper module for '$tool' (expected $wrap/go.mod and version.txt)" >&2
  exit 2
fi

# The command's package path comes from the `tool` directive; its module is the required module
# that the package lives in (the longest `require` path that prefixes it).
package=$(sed -n 's/^tool[[:space:]]\+\([^[:space:]]\+\)$/\1/p' "$wrap/go.mod")
version=$(tr -d '[:space:]' < "$wrap/version.txt")
module=""
for m in $(sed -n 's/^[[:space:]]*\([^[:space:]]\+\) v[^[:space:]]\+\( \/\/ indirect\)\?$/\1/p' "$wrap/go.mod"); do
  if [[ "$package" == "$m"/* && ${#m} -gt ${#module} ]]; then module="$m"; fi
done
if [[ -z "$package" || -z "$module" ]]; then
  echo "gotools: $wrap/go.mod needs a 'tool <package>' line and a require of its module" >&2
  exit 1
fi
if ! grep -q "^[[:space:]]*$module $version\( // indirect\)\?\$" "$wrap/go.mod"; then
  echo "gotools: $tool/go.mod does not require $module $version (version.txt); run go get -tool $package@$version" >&2
  exit 1
fi
# The version each tool prints, stamped the way the upstream Makefiles stamp it.
case "$tool" in
  helm)
    # The Kubernetes version helm assumes without a cluster (helm template, lint): the client-go
    # minor it is built with, as helm's Makefile derives it (v0.35.x -> 1.35).
    k8sminor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]\+\)\..*/\1/p' "$wrap/go.mod")
    ldflags="-X helm.sh/helm/v3/internal/version.version=$version"
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
      ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8sminor"
    done
    ;;
  *) ldflags="" ;;
esac

gover=$(GOTOOLCHAIN=local go env GOVERSION)
# Relative names: the key must not depend on where the checkout lives (CI clones elsewhere).
sumhash=$( (cd "$wrap" && sha256sum go.sum go.mod; echo "$ldflags") | sha256sum | cut -c1-12)
cache_root="${NIMBIX_BURST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbix-burst}"
root="$cache_root/$tool/$version-$gover-$sumhash"
bin="$root/bin/$tool"

if [[ -x "$bin" ]]; then
  echo "$tool $version: reusing cached binary $bin" >&2
  echo "$bin"
  exit 0
fi

echo "$tool $version: cold build of $package with $gover into $root" >&2
tmp="$root.tmp.$$"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT
log="$tmp/build.log"
start=$(date +%s)
go_build_with_progress "$tool" "$tool" "$start" "$log" "$wrap" -ldflags "-s -w $ldflags" -o "$tmp/bin/$tool" "$package" || exit 1
rm -rf "$root"
mv "$tmp" "$root"
trap - EXIT
echo "$tool $version: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
