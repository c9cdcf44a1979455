#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the demo need. Idempotent and quiet when
# everything is already there. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools
  libabsl-dev libcli11-dev libgtest-dev libgmock-dev
  libopenblas-dev
  python3-torch python3-numpy python3-h5py
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
