#!/usr/bin/env bash
# Debian packages the real node and the image builds need (containerd, runc, CNI plugins, buildah,
# mmdebstrap, iptables). Idempotent and quiet when everything is present; must run as root.
# `install-packages.sh bench`: also what `make bench` compares the runner's staging with (OpenSSH's
# sshd and sftp, lftp).
set -euo pipefail
packages=(containerd runc containernetworking-plugins buildah mmdebstrap iptables)
if [[ "${1:-}" == bench ]]; then
  packages+=(openssh-server openssh-client lftp)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "host packages missing (${missing[*]}) and not root: run as root or install them first" >&2
  exit 1
fi
echo "installing host packages: ${missing[*]}" >&2
# One lock for concurrent callers (node and image builds may start together).
exec 9>/var/lock/nimbix-burst-apt.lock
flock 9
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
