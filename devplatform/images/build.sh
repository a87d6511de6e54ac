#!/usr/bin/env bash
# Build the project's images without Docker or a registry, and export each as an OCI archive.
#
#   devplatform/images/build.sh            -> one archive path per line on stdout (base, webhook,
#                                             example-app); progress on stderr
#
# 1. A Python base from Debian packages (mmdebstrap, then `buildah from scratch`), committed as
#    localhost/debian-python:3.11-bookworm: no registry is reachable here, so python:3.11-slim cannot
#    be pulled. It is passed to the Dockerfiles as PYTHON_IMAGE.
# 2. images/base, images/webhook, images/example-app with `buildah build` (chroot isolation, host
#    network, layer cache), the Dockerfiles as they are, from the repository root.
# 3. `buildah push NAME oci-archive:FILE:NAME`; import with `ctr -n k8s.io images import FILE`, after
#    which containerd knows the image as NAME (localhost/...), the name pods use with
#    imagePullPolicy Never/IfNotPresent.
#
# Archives live in ${NIMBIX_BURST_CACHE:-$HOME/.cache/nimbix-burst}/images/<name>-<key>.tar, where the
# key hashes everything the image is built from (its Dockerfile, the files it copies, .dockerignore,
# and its base image's key), so an unchanged image is not rebuilt. buildah's storage (--root,
# --runroot) is under the same directory.
#
# A TLS-intercepting proxy: the host's CA bundle is mounted read-only into every RUN step (pip inside
# the build trusts what the host trusts); nothing is baked into the images.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${NIMBIX_BURST_CACHE:-$HOME/.cache/nimbix-burst}
OUT=$CACHE/images
STORE=$CACHE/buildah
VERSION=0.1.0
# The Debian release and packages of the Python base; python-is-python3 because the Dockerfiles run
# `python -m venv`. Part of the base's key.
SUITE=bookworm
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
PYTHON_IMAGE=localhost/debian-python:3.11-$SUITE
# The webhook's build stage compiles its decision core (mypyc): the same Python with a C toolchain.
BUILD_PACKAGES=$PACKAGES,gcc,libc6-dev,python3-dev
BUILD_IMAGE=localhost/debian-python-build:3.11-$SUITE
# Bumped when this script changes how images are made (part of every key).
RECIPE=1
HOST_CA=/etc/ssl/certs/ca-certificates.crt
# Upper bounds for each step on 2 shared cores (measured: bootstrap ~40 s, a cold image ~60 s).
BOOTSTRAP_TIMEOUT=600
BUILD_TIMEOUT=900
PUSH_TIMEOUT=300
# An archive of an older key (another checkout's, or this one's before a change) unused this long is removed.
KEEP_DAYS=2

log() { printf 'images: %s\n' "$*" >&2; }

# buildah with its own storage under the cache directory (overlay works here; vfs is not needed).
BUILDAH=(buildah --root "$STORE/root" --runroot "$STORE/runroot" --storage-driver overlay)
bah() { "${BUILDAH[@]}" "$@"; }

cleanup() {
  # A failed RUN leaves a mounted working container behind.
  bah rm --all >/dev/null 2>&1 || true
  [[ -n ${TMPDIR_BUILD:-} ]] && rm -rf "$TMPDIR_BUILD"
}

# sha256 over the named files and directories (contents and relative paths), minus what the build
# context ignores anyway (__pycache__, *.pyc).
hash_inputs() {
  (
    cd "$ROOT"
    find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z \
      | xargs -0 sha256sum
  ) | sha256sum | cut -c1-16
}

key_of() {
  local parent=$1
  shift
  printf '%s\n' "$RECIPE" "$parent" "$(hash_inputs .dockerignore "$@")" | sha256sum | cut -c1-16
}

# localhost/nimbix-burst/base:0.1.0 -> $OUT/nimbix-burst_base_0.1.0-KEY.tar (no ':' in the file name:
# the oci-archive transport splits FILE:REFERENCE at the first ':').
archive_path() {
  local name=${1#localhost/}
  name=${name//\//_}
  printf '%s/%s-%s.tar' "$OUT" "${name//:/_}" "$2"
}

have_image() { bah inspect --type image "$1" >/dev/null 2>&1; }

# The tag of the image built from exactly these inputs: other checkouts on this machine share the
# store and move the plain tag (localhost/nimbix-burst/base:0.1.0) to their own build.
keyed_tag() { printf '%s-%s' "$1" "$2"; }

# Make sure the image of ARCHIVE is in buildah's store under IMAGE-KEY (a later build uses it as its
# base): load it from its archive when that tag is missing (a wiped store, or another checkout's
# build in between).
ensure_image() {
  local image=$1 key=$2 archive=$3 id
  have_image "$(keyed_tag "$image" "$key")" && return 0
  log "loading $image ($key) from $archive"
  id=$(timeout "$PUSH_TIMEOUT" "${BUILDAH[@]}" pull --quiet "oci-archive:$archive")
  bah tag "$id" "$(keyed_tag "$image" "$key")"
}

export_archive() {
  local image=$1 archive=$2
  local tmp="$archive.tmp.$$"
  rm -f "$tmp"
  timeout "$PUSH_TIMEOUT" "${BUILDAH[@]}" push --quiet "$image" "oci-archive:$tmp:$image" >/dev/null
  mv -f "$tmp" "$archive"
}

# build_python_base IMAGE PACKAGES -> sets LAST_KEY
build_python_base() {
  local image=$1 packages=$2 key archive
  key=$(printf '%s\n' "$RECIPE" "$SUITE" "$packages" | sha256sum | cut -c1-16)
  archive=$(archive_path "${image%%:*}" "$key")
  if [[ -f $archive ]]; then
    ensure_image "$image" "$key" "$archive"
  else
    log "bootstrapping $image from Debian $SUITE packages (mmdebstrap)"
    local rootfs=$TMPDIR_BUILD/rootfs.tar
    # Documentation, manual pages and translations are left out (the copyright files stay).
    timeout "$BOOTSTRAP_TIMEOUT" mmdebstrap --quiet --variant=minbase --include="$packages" \
      --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' \
      "$SUITE" "$rootfs" >&2
    local ctr
    ctr=$(bah from --quiet scratch)
    bah add "$ctr" "$rootfs" / >&2
    bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env LANG=C.UTF-8 --cmd '["python3"]' \
      --label "org.opencontainers.image.description=python3 from Debian $SUITE packages" "$ctr"
    bah commit --quiet --rm --format oci "$ctr" "$image" >/dev/null
    bah tag "$image" "$(keyed_tag "$image" "$key")"
    rm -f "$rootfs"
    export_archive "$image" "$archive"
  fi
  LAST_KEY=$key
}

# build_image NAME DOCKERFILE PARENT_KEY BUILD_ARGS INPUT... -> sets LAST_KEY, LAST_ARCHIVE
# (BUILD_ARGS: NAME=VALUE words separated by spaces)
build_image() {
  local name=$1 dockerfile=$2 parent_key=$3 build_args=()
  read -r -a build_args <<<"$4"
  build_args=("${build_args[@]/#/--build-arg=}")
  shift 4
  local key archive
  key=$(key_of "$parent_key" "$dockerfile" "$@")
  archive=$(archive_path "$name" "$key")
  if [[ -f $archive ]]; then
    log "$name: up to date ($archive)"
  else
    log "building $name"
    local started=$SECONDS
    local volumes=()
    [[ -f $HOST_CA ]] && volumes+=(--volume "$HOST_CA:$HOST_CA:ro")
    (
      cd "$ROOT"
      timeout "$BUILD_TIMEOUT" "${BUILDAH[@]}" build --isolation chroot --network host --layers \
        --format oci "${volumes[@]}" "${build_args[@]}" -f "$dockerfile" -t "$name" . >&2
    )
    bah tag "$name" "$(keyed_tag "$name" "$key")"
    export_archive "$name" "$archive"
    log "$name: built in $((SECONDS - started)) s"
    BUILT=1
  fi
  touch "$archive"  # in use: its age says when a checkout last needed it
  # Archives of the same image that no build has used for KEEP_DAYS are stale. Not the newest
  # alone: another checkout on this machine may be about to import its own (a test session builds
  # its images first and imports them into the node minutes later).
  find "$OUT" -maxdepth 1 -name "$(basename "${archive%-*}")-*.tar" ! -path "$archive" -mtime +"$KEEP_DAYS" \
    -delete
  LAST_KEY=$key
  LAST_ARCHIVE=$archive
}

# Keyed tags whose archive is gone (removed as stale above) hold their images in the store: untag them,
# so the prune below frees their layers.
forget_removed_keys() {
  local tag name key
  while read -r tag; do
    [[ $tag == localhost/*:*-* ]] || continue
    name=${tag%-*} key=${tag##*-}
    [[ $key =~ ^[0-9a-f]{16}$ ]] || continue
    # The project's images are archived under their whole name, the Python bases under the name alone.
    [[ -f $(archive_path "$name" "$key") || -f $(archive_path "${name%%:*}" "$key") ]] && continue
    bah rmi "$tag" >/dev/null 2>&1 || true
  done < <(bah images --format '{{.Name}}:{{.Tag}}' 2>/dev/null)
}

main() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "images: must run as root (buildah with chroot isolation, mmdebstrap)" >&2
    exit 1
  fi
  "$ROOT/devplatform/host/install-packages.sh"
  mkdir -p "$OUT" "$STORE"
  # One build at a time per cache directory (tests and the node may start builds together).
  exec 8>"$OUT/.lock"
  flock 8
  TMPDIR_BUILD=$(mktemp -d "$CACHE/build.XXXXXX")
  trap cleanup EXIT

  build_python_base "$PYTHON_IMAGE" "$PACKAGES"
  local python_key=$LAST_KEY python
  python=$(keyed_tag "$PYTHON_IMAGE" "$python_key")
  build_python_base "$BUILD_IMAGE" "$BUILD_PACKAGES"
  local build_key=$LAST_KEY build
  build=$(keyed_tag "$BUILD_IMAGE" "$build_key")
  local archives=()
  build_image localhost/nimbix-burst/base:$VERSION images/base/Dockerfile "$python_key" \
    "PYTHON_IMAGE=$python" images/base pyproject.toml README.md constraints.txt jarvice entrypoint
  local base_key=$LAST_KEY
  archives+=("$LAST_ARCHIVE")
  build_image localhost/nimbix-burst-webhook:$VERSION images/webhook/Dockerfile "$python_key-$build_key" \
    "PYTHON_IMAGE=$python BUILD_IMAGE=$build" images/webhook pyproject.toml README.md constraints.txt \
    jarvice webhook entrypoint controller kubeplumbing kubectl_nimbix gateway
  archives+=("$LAST_ARCHIVE")
  # The example app is built FROM this checkout's base (by its keyed tag: the plain one may be another
  # checkout's), loaded from its archive when the store lacks it.
  ensure_image localhost/nimbix-burst/base:$VERSION "$base_key" "${archives[0]}"
  build_image localhost/nimbix-burst/example-app:$VERSION images/example-app/Dockerfile "$base_key" \
    "BASE_IMAGE=$(keyed_tag localhost/nimbix-burst/base:$VERSION "$base_key")" images/example-app \
    images/base/AppDef.json
  archives+=("$LAST_ARCHIVE")
  forget_removed_keys
  if [[ -n ${BUILT:-} ]]; then
    # Superseded images and intermediate layers would otherwise grow the store by ~0.5 GB per
    # rebuild; the archive keys, not buildah's layer cache, are what keeps unchanged images from
    # being rebuilt.
    bah rmi --prune >/dev/null 2>&1 || true
  fi
  printf '%s\n' "${archives[@]}"
}

main "$@"
