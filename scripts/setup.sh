#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
#
# Installs the Debian 12 packages commpress needs to build, test, benchmark and run its demo.
# Idempotent: when everything is present it changes nothing and needs no network.
# The CUDA toolkit (nvcc, CCCL, NCCL) is not a Debian package; when it is absent the CUDA
# targets are skipped by CMake.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libeigen3-dev doctest-dev libbenchmark-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist python3-matplotlib
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
echo "setup: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}"
