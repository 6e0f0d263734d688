// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// Scaling of cpu::par against cpu::seq: cast bf16 encode, 4-bit block-1024 quantize decode and
// decode_accumulate at 64 Mi fp32 elements. Each row times, interleaved in one process
// (common/interleave.hpp, so host drift hits all of them alike):
// - `kernel`: the whole call under cpu::par (OpenMP's default team: OMP_NUM_THREADS or the
//   cores), header, checksum and validation included;
// - `seq`: the same call under cpu::seq;
// - `body` / `seq_body`: the codec's body loop alone (codec_impl::encode_body, decode_body or
//   accumulate_body) under each policy, i.e. the part par parallelizes; the payload checksum
//   (written by encode, checked by decode) stays on one thread.
// The label's ratios seq/kernel and seq_body/body are the speedups; scripts/bench_table.py
// prints them (its goal column only says "not slower than seq").
//
//   OMP_NUM_THREADS=2 build-par/bench/commpress_par_bench --benchmark_format=json \
//     --benchmark_out=par.json
//   python3 scripts/bench_table.py par.json
//
// COMMPRESS_BENCH_N overrides the element count (default 64 Mi = 2^26), COMMPRESS_BENCH_ITERS
// the iterations of every row (default 15).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "common/buffers.hpp"
#include "common/interleave.hpp"
#include "commpress/backend/cpu/par.hpp"
#include "commpress/codec_ops.hpp"

namespace cp = commpress;
using commpress_bench::bench_elements;
using commpress_bench::bench_iterations;
using commpress_bench::gaussian_input;
using commpress_bench::run_interleaved;
using commpress_bench::scratch;
using commpress_bench::scratch_floats;
using commpress_bench::timed;

namespace {

/// The team cpu::par forks by default (1 without OpenMP).
int omp_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Scratch slots: one per output, so the policies of a row write to separate pre-faulted
// buffers.
enum slot : int { payload_par = 0, payload_seq = 1, payload = 2, out_par = 3, out_seq = 4 };

const char* const speedups = "seq/kernel>=1;seq_body/body>=1";

template <class F> void add(const std::string& name, F fn) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [fn](benchmark::State& s) {
    s.SetLabel(speedups);
    fn(s);
  });
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(bench_iterations(15));
}

const unsigned char* body_of(std::span<const std::byte> p) {
  return reinterpret_cast<const unsigned char*>(p.data() + cp::format::header_bytes);
}

/// encode (whole call) and encode_body (body loop) of codec c under policy p.
template <class Policy, class C>
std::pair<timed, timed> encode_fns(const std::string& tag, const Policy& p, const C& c,
                                   std::span<const float> x, int slot) {
  auto out = scratch(slot, cp::max_payload_bytes(c, x.size()));
  const cp::context ctx{.seed = 1, .tensor_id = 3};
  return {{tag.empty() ? "kernel" : tag,
           [p, c, ctx, x, out] {
             cp::encode(p, c, ctx, x, out);
             benchmark::DoNotOptimize(out.data());
           }},
          {tag.empty() ? "body" : tag + "_body", [p, c, ctx, x, out] {
             auto* body = reinterpret_cast<unsigned char*>(out.data() + cp::format::header_bytes);
             cp::detail::codec_impl<C, Policy>::encode_body(p, c, ctx, x, body, {});
             benchmark::DoNotOptimize(out.data());
           }}};
}

/// decode or decode_accumulate (whole call) and its body loop under policy p.
template <bool Accumulate, class Policy, class C>
std::pair<timed, timed> decode_fns(const std::string& tag, const Policy& p, const C& c,
                                   std::span<const std::byte> payload, std::span<float> out) {
  const cp::payload_header h = cp::format::validate_for(payload, c, out.size());
  using impl = cp::detail::codec_impl<C, Policy>;
  return {{tag.empty() ? "kernel" : tag,
           [p, c, payload, out] {
             if constexpr (Accumulate) {
               cp::decode_accumulate(p, c, payload, out, 0.5f);
             } else {
               cp::decode(p, c, payload, out);
             }
             benchmark::DoNotOptimize(out.data());
           }},
          {tag.empty() ? "body" : tag + "_body", [p, c, h, payload, out] {
             if constexpr (Accumulate) {
               impl::accumulate_body(p, c, h, body_of(payload), out, 0.5f);
             } else {
               impl::decode_body(p, c, h, body_of(payload), out);
             }
             benchmark::DoNotOptimize(out.data());
           }}};
}

void register_all() {
  const std::size_t n = bench_elements();

  add("par/cast/bf16/encode", [n](benchmark::State& s) {
    const auto x = gaussian_input(n);
    const cp::cast c{.to = cp::dtype::bf16};
    auto [par, par_body] = encode_fns("", cp::cpu::par, c, x, payload_par);
    auto [seq, seq_body] = encode_fns("seq", cp::cpu::seq, c, x, payload_seq);
    run_interleaved(s, n, {par, seq, par_body, seq_body});
  });

  const cp::quantize q{.bits = 4, .granularity = cp::scale_granularity::block, .group = 1024};
  const auto payload_of = [n, q] {
    auto p = scratch(payload, cp::max_payload_bytes(q, n));
    cp::encode(cp::cpu::seq, q, {.seed = 1, .tensor_id = 3}, gaussian_input(n), p);
    return std::span<const std::byte>(p);
  };
  add("par/dequantize/4bit/block1024/decode", [n, q, payload_of](benchmark::State& s) {
    const auto p = payload_of();
    auto [par, par_body] = decode_fns<false>("", cp::cpu::par, q, p, scratch_floats(out_par, n));
    auto [seq, seq_body] = decode_fns<false>("seq", cp::cpu::seq, q, p, scratch_floats(out_seq, n));
    run_interleaved(s, n, {par, seq, par_body, seq_body});
  });
  add("par/dequantize/4bit/block1024/decode_accumulate", [n, q, payload_of](benchmark::State& s) {
    const auto p = payload_of();
    // Both accumulators start at 0 and grow by 0.5 * deQ per call: the same work every call.
    auto acc_par = scratch_floats(out_par, n);
    auto acc_seq = scratch_floats(out_seq, n);
    std::fill(acc_par.begin(), acc_par.end(), 0.0f);
    std::fill(acc_seq.begin(), acc_seq.end(), 0.0f);
    auto [par, par_body] = decode_fns<true>("", cp::cpu::par, q, p, acc_par);
    auto [seq, seq_body] = decode_fns<true>("seq", cp::cpu::seq, q, p, acc_seq);
    run_interleaved(s, n, {par, seq, par_body, seq_body});
  });
}

} // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::AddCustomContext("page_policy", commpress_bench::page_policy());
  benchmark::AddCustomContext("elements", std::to_string(bench_elements()));
  benchmark::AddCustomContext("par_threads", std::to_string(omp_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
