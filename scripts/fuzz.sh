#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
#
# Builds the libFuzzer targets of fuzz/ with Clang (ASan + UBSan) and runs each one for SECONDS,
# starting from its seed corpus in fuzz/corpus/<target>/, all of them side by side. Fails on any
# crash, leak, timeout or sanitizer report; prints the executions of every target (libFuzzer's
# "Done N runs").
#
# Usage: scripts/fuzz.sh [SECONDS=60]
# Environment: COMMPRESS_FUZZ_BUILD_DIR (default build-fuzz), CXX (default clang++),
#              COMMPRESS_FUZZ_TARGETS (default: every target that was built).
# Crash reproducers land in <build dir>/artifacts/; new inputs in <build dir>/corpus/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
build=${COMMPRESS_FUZZ_BUILD_DIR:-build-fuzz}
cxx=${CXX:-clang++}
if [[ "$("$cxx" --version 2>/dev/null)" != *clang* ]]; then
  cxx=clang++
fi

# -g1: line tables only, so that a report names the file and line; full -g compiles slower.
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCOMMPRESS_BUILD_FUZZERS=ON -DCOMMPRESS_BUILD_TESTS=OFF -DCOMMPRESS_BUILD_BENCHMARKS=OFF \
  -DCOMMPRESS_BUILD_EXAMPLES=OFF -DCOMMPRESS_ENABLE_CUDA=OFF -DCOMMPRESS_ENABLE_MPI=OFF \
  -DCOMMPRESS_INSTALL=OFF >/dev/null
targets=${COMMPRESS_FUZZ_TARGETS:-$(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')}
# shellcheck disable=SC2086
cmake --build "$build" --target $targets

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/artifacts"
fuzz_one() { # target: becomes its fuzzer (run it in the background), its log in $build/<t>.log
  local t=$1
  mkdir -p "$build/corpus/$t"
  exec "$build/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "fuzz/corpus/$t" \
    >"$build/$t.log" 2>&1
}
# shellcheck disable=SC2086
read -r -a names <<<"$(printf '%s\n' $targets | awk '!seen[$0]++' | tr '\n' ' ')" # each once
echo "=== fuzzing side by side, ${seconds}s each: ${names[*]}"
pids=()
stop_fuzzers() { kill "${pids[@]}" 2>/dev/null || true; }
trap stop_fuzzers EXIT # no fuzzer outlives the script
trap 'stop_fuzzers; exit 130' INT TERM
for t in "${names[@]}"; do
  fuzz_one "$t" &
  pids+=($!)
done
status=0
summary=()
for i in "${!names[@]}"; do
  t=${names[$i]}
  log="$build/$t.log"
  if wait "${pids[$i]}"; then
    result=ok
  else
    result=FAILED
    status=1
    echo "=== $t failed:"
    tail -n 60 "$log"
  fi
  runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -n 1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
  summary+=("$t: $result, ${runs:-no final stats}, ${cov:-}")
done
echo "=== fuzz summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
exit $status
