#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
#
# On a machine with an NVIDIA GPU: configure for that GPU's architecture, build only the CUDA
# tests and benchmarks, run them, and leave everything in ${OUT:-results}/:
#   configure.log build.log         cmake output
#   cuda-tests.txt                  doctest output, with per-test-case durations
#   cuda-bench.json cuda-bench.csv  Google Benchmark results
#   nvidia-smi.txt                  the device it ran on
# Sized to finish in well under 8 minutes on one H200 (bounded benchmark iterations).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-results}"
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"
build="${BUILD_DIR:-${root}/build-gpu-check}"
jobs="${JOBS:-$(nproc)}"

nvidia-smi > "${out}/nvidia-smi.txt" 2>&1 || true
# Compute capability of the first GPU, e.g. "9.0" -> 90; default to Hopper.
cc="$({ nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true; } |
  head -n1 | tr -d ' .')"
arch="${CUDA_ARCH:-${cc:-90}}"
echo "commpress gpu-check: CUDA architecture ${arch}, ${jobs} build jobs, results in ${out}"

# A Release build for this GPU's architecture only.
cmake -S "${root}" -B "${build}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${arch}" \
  -DCOMMPRESS_BUILD_TESTS=ON -DCOMMPRESS_BUILD_BENCHMARKS=ON -DCOMMPRESS_BUILD_EXAMPLES=OFF \
  > "${out}/configure.log" 2>&1 || { tail -n 30 "${out}/configure.log"; exit 1; }
targets=(commpress_cuda_tests)
cmake --build "${build}" --target help > "${out}/targets.txt" 2>&1 || true
if grep -q commpress_cuda_bench "${out}/targets.txt"; then
  targets+=(commpress_cuda_bench)
fi
cmake --build "${build}" -j "${jobs}" --target "${targets[@]}" > "${out}/build.log" 2>&1 ||
  { grep -m 20 -A 5 "error" "${out}/build.log"; exit 1; }

status=0
timeout 300 "${build}/tests/cuda/commpress_cuda_tests" --duration=true \
  > "${out}/cuda-tests.txt" 2>&1 || status=$?
tail -n 4 "${out}/cuda-tests.txt"

bench="$(find "${build}" -name commpress_cuda_bench -type f -perm -u+x | head -n1)"
if [[ -n "${bench}" ]]; then
  timeout 150 "${bench}" --benchmark_out="${out}/cuda-bench.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=true > "${out}/cuda-bench.txt" 2>&1 || status=$?
  python3 - "${out}/cuda-bench.json" "${out}/cuda-bench.csv" <<'PY' || true
import csv, json, sys
rows = json.load(open(sys.argv[1]))["benchmarks"]
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["name", "ms", "GBps", "copy_GBps", "copy_fraction", "payload_bytes", "error"])
    for b in rows:
        w.writerow([b["name"], b.get("real_time"), b.get("GBps"), b.get("copy_GBps"),
                    b.get("copy_fraction"), b.get("payload_bytes"), b.get("error_message", "")])
PY
  cat "${out}/cuda-bench.txt" | tail -n 40
fi
exit "${status}"
