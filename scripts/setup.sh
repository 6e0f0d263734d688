#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
#
# Installs the Debian 12 packages commpress needs to build, test, benchmark and run its demo,
# then the Python package (binding and PyTorch adapters) into a virtual environment, .venv, made
# with Debian's python3 so that it sees Debian's python3-torch.
# Idempotent: when everything is present and the sources did not change it changes nothing and
# needs no network. The CUDA toolkit (nvcc, CCCL, NCCL) is not a Debian package; when it is
# absent the CUDA targets are skipped by CMake.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libeigen3-dev doctest-dev libbenchmark-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist python3-matplotlib
  clang libclang-rt-14-dev
  python3-venv python3-dev python3-numpy python3-pytest python3-torch
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
else
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

# --- the Python package -------------------------------------------------------------------------
# Debian's python3-torch is built for /usr/bin/python3, so the environment is made with that
# interpreter (not whichever python3 comes first on PATH) and sees the system packages.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup: creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
# ml_dtypes (the tests' independent fp8 / fp4 conversions): 0.5 is the last series that runs
# with Debian's NumPy 1.24.
if ! "$venv/bin/python" -c "import nanobind, scikit_build_core, ml_dtypes" 2>/dev/null; then
  echo "setup: installing nanobind, scikit-build-core and ml_dtypes into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "nanobind>=2.0" "scikit-build-core>=0.10" \
    "ml_dtypes>=0.5,<0.6"
fi
# Re-install only when a source the package is built from changed. The build directory
# (build/python) persists, so a re-install recompiles only the translation units that changed.
sources=$(cd "$root" && find include python/src python/commpress cmake python/CMakeLists.txt \
  CMakeLists.txt pyproject.toml -type f ! -path '*/__pycache__/*' -print0 | sort -z |
  xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
stamp="$venv/.commpress-sources"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$sources" ]] &&
  "$venv/bin/python" -c "import commpress._commpress" 2>/dev/null; then
  echo "setup: python package commpress up to date in $venv"
else
  echo "setup: building and installing the python package commpress into $venv"
  start=$(date +%s)
  # Built for this machine (COMMPRESS_PYTHON_NATIVE): the environment runs here only.
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "$venv/bin/pip" install -q \
    --disable-pip-version-check --no-build-isolation --no-deps \
    --config-settings=cmake.define.COMMPRESS_PYTHON_NATIVE=ON "$root"
  echo "$sources" >"$stamp"
  echo "setup: python package built and installed in $(($(date +%s) - start)) s"
fi
