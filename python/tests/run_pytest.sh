#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
#
# CTest's `python` test: runs the Python suite with the interpreter of the virtual environment
# scripts/setup.sh made (argument 1), where the package is installed. Exits 77 (skipped) with
# a message when that environment or the package is missing.
set -uo pipefail
venv=${1:?usage: run_pytest.sh <venv>}
py="$venv/bin/python"
if [[ ! -x "$py" ]]; then
  echo "python tests skipped: no virtual environment at $venv (run ./scripts/setup.sh)"
  exit 77
fi
if ! "$py" -c "import commpress._commpress, torch, pytest" 2>/dev/null; then
  echo "python tests skipped: $venv lacks commpress, torch or pytest (run ./scripts/setup.sh)"
  exit 77
fi
cd "$(dirname "$0")/../.." || exit 1
# Debian's PyTorch convolves through oneDNN, whose AVX2 kernels crash in the backward pass of
# the small ResNet's 1x1 convolutions under DDP on some AVX2 hosts without AVX-512 (a heap
# corruption in libdnnl, with or without compression: docs/python.md, "Known issues"). Its
# AVX kernels do not; a cap the caller set is kept.
if ! grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-AVX}
fi
# The installed package, not the source tree: run from a directory that does not shadow it.
exec "$py" -m pytest -q -p no:cacheprovider --rootdir=python/tests python/tests "${@:2}"
