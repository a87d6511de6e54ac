#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, and the real
# node's kubelet, kube-proxy and pause (sandbox) binaries from the wrapper module in gowrap/, into
# a cache directory keyed by (Kubernetes version, Go version, go.sum hash). A warm cache means no
# build at all; a fresh clone on the same machine reuses it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../gobuild.sh
. "$here/../gobuild.sh"
wrap="$here/gowrap"
components="etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kube-proxy pause"

kver=$(tr -d '[:space:]' < "$wrap/k8s-version.txt")
gover=$(GOTOOLCHAIN=local go env GOVERSION)
# Relative names: the key must not depend on where the checkout lives (CI clones elsewhere).
sumhash=$(cd "$wrap" && sha256sum go.sum go.mod cmd/*/main.go | sha256sum | cut -c1-12)
cache_root="${NIMBIX_BURST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbix-burst}"
bin="$cache_root/controlplane/$kver-$gover-$sumhash/bin"

complete=1
for c in $components; do [[ -x "$bin/$c" ]] || complete=0; done
if [[ $complete == 1 ]]; then
  echo "control plane $kver: reusing cached binaries in $bin" >&2
  echo "$bin"
  exit 0
fi

echo "control plane $kver: cold build with $gover into $bin" >&2
echo "  (first build downloads modules and compiles ~4k packages: about 6-10 min on 2 cores)" >&2
tmp="$bin.tmp.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
log="$tmp/build.log"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$kver" | cut -d. -f2)"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2025-01-01T00:00:00Z"
done

start=$(date +%s)
go_build_with_progress "$components" "control plane" "$start" "$log" "$wrap" -ldflags "$ldflags" -o "$tmp/" ./cmd/... || exit 1
mkdir -p "$(dirname "$bin")"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "control plane $kver: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
