#!/usr/bin/env bash
# Takes one command-line tool from the Debian package that ships it (promtool from `prometheus`),
# without installing the package: `apt-get download` + `dpkg-deb -x` into a cache directory keyed by
# the package's exact version. Installing would start the package's Prometheus service; extracting
# the binary keeps the host as it was. A warm cache means no download at all.
#
# Usage: fetch.sh promtool
# Progress goes to stderr; the last line of stdout is the binary's path.
set -euo pipefail
tool="${1:?usage: fetch.sh promtool}"
case "$tool" in
  promtool) package=prometheus; member=usr/bin/promtool ;;
  *) echo "debtools: no Debian package known for '$tool' (known: promtool)" >&2; exit 2 ;;
esac

version=$(apt-cache policy "$package" 2>/dev/null | sed -n 's/^[[:space:]]*Candidate:[[:space:]]*//p')
if [[ -z "$version" || "$version" == "(none)" ]]; then
  # A machine whose package lists were never fetched knows no candidate yet.
  if [[ $(id -u) -eq 0 ]]; then
    echo "debtools: no candidate for $package; running apt-get update" >&2
    exec 9>/var/lock/nimbix-burst-apt.lock
    flock 9
    apt-get update -qq
    version=$(apt-cache policy "$package" 2>/dev/null | sed -n 's/^[[:space:]]*Candidate:[[:space:]]*//p')
  fi
fi
if [[ -z "$version" || "$version" == "(none)" ]]; then
  echo "debtools: Debian offers no '$package' package here (apt-cache policy $package); run apt-get update as root" >&2
  exit 1
fi
cache_root="${NIMBIX_BURST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nimbix-burst}"
# Epochs and '+' are legal in Debian versions; ':' is not welcome in a path.
root="$cache_root/debtools/$package-${version//:/_}"
bin="$root/$member"
if [[ -x "$bin" ]]; then
  echo "$tool: reusing $bin (Debian $package $version)" >&2
  echo "$bin"
  exit 0
fi

echo "$tool: fetching Debian $package $version" >&2
start=$(date +%s)
tmp="$root.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/deb"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp/deb" && apt-get download -q "$package=$version" >&2)
deb=$(ls "$tmp"/deb/*.deb)
dpkg-deb -x "$deb" "$tmp/tree"
if [[ ! -x "$tmp/tree/$member" ]]; then
  echo "debtools: $deb holds no executable $member" >&2
  exit 1
fi
mkdir -p "$root.new/$(dirname "$member")"
mv "$tmp/tree/$member" "$root.new/$member"
rm -rf "$root"
mv "$root.new" "$root"
echo "$tool: ready in $(( $(date +%s) - start ))s ($bin)" >&2
echo "$bin"
