// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// The roofline table of bench/README.md ("CPU codecs at memory speed"): every codec kernel at 64 Mi
// fp32 elements, single thread, timed interleaved with its baselines in the same process (an fp32
// copy, a read-only pass, std::nth_element on |x|, or the nearest-rounding kernel), so host drift
// hits both sides of each ratio alike (bench/README.md, "Noise on these VMs"). Each benchmark's
// label states its goals as ratios of the `<name>_ns` counters; scripts/bench_table.py prints the
// table from the JSON.
//
//   GLIBC_TUNABLES=glibc.malloc.hugetlb=1 taskset -c 0 build-perf/bench/commpress_roofline_bench \
//     --benchmark_format=json --benchmark_out=roofline.json
//   python3 scripts/bench_table.py roofline.json
//
// COMMPRESS_BENCH_N overrides the element count (default 64 Mi = 2^26), COMMPRESS_BENCH_ITERS
// the iterations of every row.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "common/buffers.hpp"
#include "common/interleave.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/commpress.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;
using commpress_bench::bench_elements;
using commpress_bench::bench_iterations;
using commpress_bench::gaussian_input;
using commpress_bench::run_interleaved;
using commpress_bench::scratch;
using commpress_bench::scratch_floats;
using commpress_bench::timed;

namespace {

// Scratch slots: each benchmark re-requests what it needs, so sizes only grow.
enum slot : int {
  copy_out = 0,
  payload = 1,
  workspace = 2,
  decoded = 3,
  keys = 4,
  accum = 5,
  floor_out = 6,
  floor_update = 7,
};

/// Streams `lines` 64-byte lines of src (`passes` times over its first lines / passes), and
/// for every four of them the proportional share of non-temporal stores to dst and in-place
/// updates of rmw, whose line counts are precomputed in 16.16 fixed point (no division in the
/// loop). Four independent accumulators keep the loads in flight. Not inlined, so that the
/// compiler keeps everything in registers.
[[gnu::noinline]] void stream_floor(const std::byte* src, std::size_t lines, unsigned passes,
                                    std::byte* dst, std::size_t write, std::byte* rmw,
                                    std::size_t update) {
  const std::size_t per_pass = lines / passes;
  const std::size_t quads = lines / 4;
  const std::uint64_t w_per = (write / 64 << 16) / (quads == 0 ? 1 : quads);
  const std::uint64_t u_per = (update / 64 << 16) / (quads == 0 ? 1 : quads);
  std::uint64_t w_acc = 0, u_acc = 0;
#if defined(__AVX512F__)
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (std::size_t q = 0; q < quads; ++q) {
    const std::size_t l = 4 * q < per_pass ? 4 * q : 4 * q - per_pass;
    const std::byte* p = src + 64 * l;
    a = _mm512_xor_si512(a, _mm512_loadu_si512(p));
    b = _mm512_xor_si512(b, _mm512_loadu_si512(p + 64));
    c = _mm512_xor_si512(c, _mm512_loadu_si512(p + 128));
    d = _mm512_xor_si512(d, _mm512_loadu_si512(p + 192));
    for (w_acc += w_per; w_acc >= 1u << 16; w_acc -= 1u << 16, dst += 64)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), a);
    for (u_acc += u_per; u_acc >= 1u << 16; u_acc -= 1u << 16, rmw += 64) {
      auto* r = reinterpret_cast<__m512i*>(rmw);
      _mm512_store_si512(r, _mm512_add_epi32(_mm512_load_si512(r), b));
    }
  }
  _mm_sfence();
  a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
  benchmark::DoNotOptimize(a);
#else // no streaming stores: plain word loops, an upper bound of the floor
  std::uint64_t acc = 0;
  for (std::size_t q = 0; q < quads; ++q) {
    const std::size_t l = 4 * q < per_pass ? 4 * q : 4 * q - per_pass;
    for (unsigned k = 0; k < 32; ++k) {
      std::uint64_t v;
      std::memcpy(&v, src + 64 * l + 8 * k, 8);
      acc ^= v;
    }
    for (w_acc += w_per; w_acc >= 1u << 16; w_acc -= 1u << 16, dst += 64)
      for (unsigned k = 0; k < 8; ++k)
        std::memcpy(dst + 8 * k, &acc, 8);
    for (u_acc += u_per; u_acc >= 1u << 16; u_acc -= 1u << 16, rmw += 64)
      for (unsigned k = 0; k < 8; ++k) {
        std::uint64_t v;
        std::memcpy(&v, rmw + 8 * k, 8);
        v += acc;
        std::memcpy(rmw + 8 * k, &v, 8);
      }
  }
  benchmark::DoNotOptimize(acc);
#endif
}

/// The traffic floor of a kernel: the bytes it must move, with nothing computed. The kernel's
/// own input `source` streams in `passes` (1 or 2) times, `write` bytes stream out with
/// non-temporal stores (no read for ownership), and `update` bytes are read and written back in
/// place, interleaved as a kernel interleaves them. A kernel at its floor is at this machine's
/// memory roofline.
timed floor_ref(std::span<const std::byte> source, unsigned passes, std::size_t write,
                std::size_t update) {
  auto out = scratch(floor_out, write + 256);
  auto upd = scratch(floor_update, update + 256);
  return {"floor", [source, passes, out, upd, write, update] {
            stream_floor(source.data(), passes * (source.size() / 64), passes, out.data(), write,
                         upd.data(), update);
          }};
}

/// The compute floor of stochastic rounding: element i's random word, random_u32(key, step, i),
/// for every element, from philox_words (the kernels' own Philox, into one L1 chunk), with
/// nothing read or written. No stochastic kernel can run faster than its random words.
timed random_words_ref(std::size_t n) {
  return {"floor", [n] {
            namespace detail = cp::cpu::detail;
            alignas(64) std::uint32_t words[detail::code_chunk];
            const cp::rng_key key = cp::make_rng_key(1, 3);
            std::uint32_t fold = 0;
            for (std::size_t i = 0; i < n; i += detail::code_chunk) {
              const std::size_t m = n - i < detail::code_chunk ? n - i : detail::code_chunk;
              detail::philox_words(key, 0, i / 4, (m + 3) / 4, words);
              fold ^= words[m - 1];
            }
            benchmark::DoNotOptimize(fold);
          }};
}

/// The same-process reference: an fp32 copy of the input (memcpy, as a user would write it).
timed copy_ref(std::span<const float> x) {
  auto out = scratch_floats(copy_out, x.size());
  return {"copy", [x, out] {
            std::memcpy(out.data(), x.data(), 4 * x.size());
            benchmark::DoNotOptimize(out.data());
          }};
}

/// The read-only reference: a sum over the input, 16 independent accumulators so it vectorizes.
timed read_ref(std::span<const float> x) {
  return {"read", [x] {
            float acc[16] = {};
            const std::size_t n = x.size() / 16 * 16;
            for (std::size_t i = 0; i < n; i += 16)
              for (unsigned j = 0; j < 16; ++j)
                acc[j] += x[i + j];
            float s = 0;
            for (float a : acc)
              s += a;
            benchmark::DoNotOptimize(s);
          }};
}

template <class Codec> timed encode_fn(const char* name, Codec c, std::span<const float> x) {
  const std::size_t bytes = cp::max_payload_bytes(c, x.size());
  auto out = scratch(payload, bytes);
  auto ws = scratch(workspace, cp::workspace_bytes(cp::cpu::seq, c, x.size()) + 1);
  return {name, [c, x, out, ws] {
            cp::context ctx{.seed = 1, .tensor_id = 3};
            cp::encode(cp::cpu::seq, c, ctx, x, out, ws);
            benchmark::DoNotOptimize(out.data());
          }};
}

void with_label(benchmark::internal::Benchmark* b) {
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

template <class F> void add(const std::string& name, const std::string& goals, int iters, F fn) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [fn, goals](benchmark::State& s) {
    s.SetLabel(goals);
    fn(s);
  });
  with_label(b);
  b->Iterations(bench_iterations(iters));
}

void register_all() {
  const std::size_t n = bench_elements();

  // --- cast ------------------------------------------------------------------------------------
  for (auto [name, to] : {std::pair{"cast/bf16", cp::dtype::bf16}, {"cast/f16", cp::dtype::f16}})
    add(name, "kernel/copy<=0.85", 15, [n, to = to](benchmark::State& s) {
      const auto x = gaussian_input(n);
      run_interleaved(s, n,
                      {encode_fn("kernel", cp::cast{.to = to}, x), copy_ref(x),
                       floor_ref(std::as_bytes(x), 1, 2 * n, 0)});
    });

  // --- quantize, nearest and stochastic ----------------------------------------------------------
  struct qrow {
    unsigned bits;
    cp::scale_granularity gran;
    std::uint32_t group;
    std::string tag;
    cp::quant_range range = cp::quant_range::symmetric;
  };
  std::vector<qrow> rows;
  for (unsigned b : {8u, 4u, 2u}) {
    rows.push_back({b, cp::scale_granularity::block, 1024, "block1024"});
    rows.push_back({b, cp::scale_granularity::block, 128, "block128"});
    rows.push_back({b, cp::scale_granularity::tensor, 0, "tensor"});
  }
  // The asymmetric range (min and max per group), at one width.
  rows.push_back(
      {4, cp::scale_granularity::block, 1024, "block1024/minmax", cp::quant_range::asymmetric});
  rows.push_back(
      {4, cp::scale_granularity::tensor, 0, "tensor/minmax", cp::quant_range::asymmetric});
  for (const auto& r : rows) {
    const cp::quantize nearest{
        .bits = r.bits, .granularity = r.gran, .group = r.group, .range = r.range};
    cp::quantize stochastic = nearest;
    stochastic.round = cp::rounding::stochastic;
    const std::string base = "quantize/" + std::to_string(r.bits) + "bit/" + r.tag;
    // A per-tensor scale needs the whole tensor before the first code: two passes over x.
    const unsigned passes = r.gran == cp::scale_granularity::tensor ? 2 : 1;
    add(base + "/nearest", "kernel/copy<=0.80", 15, [n, nearest, passes](benchmark::State& s) {
      const auto x = gaussian_input(n);
      run_interleaved(s, n,
                      {encode_fn("kernel", nearest, x), copy_ref(x),
                       floor_ref(std::as_bytes(x), passes, nearest.body_bytes(n), 0)});
    });
    add(base + "/stochastic", "kernel/nearest<=1.5", 11,
        [n, nearest, stochastic](benchmark::State& s) {
          const auto x = gaussian_input(n);
          run_interleaved(s, n,
                          {encode_fn("kernel", stochastic, x), encode_fn("nearest", nearest, x),
                           copy_ref(x), random_words_ref(n)});
        });
  }

  // --- dequantize and decode_accumulate --------------------------------------------------------
  for (const auto [b, range] : {std::pair{8u, cp::quant_range::symmetric},
                                {4u, cp::quant_range::symmetric},
                                {2u, cp::quant_range::symmetric},
                                {4u, cp::quant_range::asymmetric}}) {
    const cp::quantize q{
        .bits = b, .granularity = cp::scale_granularity::block, .group = 1024, .range = range};
    const std::string base = "dequantize/" + std::to_string(b) + "bit/block1024" +
                             (range == cp::quant_range::asymmetric ? "/minmax" : "");
    const auto payload_of = [n, q] {
      const auto x = gaussian_input(n);
      const std::size_t bytes = cp::max_payload_bytes(q, n);
      auto p = scratch(payload, bytes);
      auto ws = scratch(workspace, cp::workspace_bytes(cp::cpu::seq, q, n) + 1);
      cp::encode(cp::cpu::seq, q, {.seed = 1, .tensor_id = 3}, x, p, ws);
      return std::span<const std::byte>(p);
    };
    add(base + "/decode", "kernel/copy<=1.0", 15, [n, q, payload_of](benchmark::State& s) {
      const auto p = payload_of();
      auto out = scratch_floats(decoded, n);
      // The payload is read twice: validated (checksum) before anything is written.
      run_interleaved(s, n,
                      {{"kernel", [q, p, out] { cp::decode(cp::cpu::seq, q, p, out); }},
                       copy_ref(gaussian_input(n)),
                       floor_ref(p, 2, 4 * n, 0)});
    });
    add(base + "/decode_accumulate", "kernel/copy<=1.0", 15,
        [n, q, payload_of](benchmark::State& s) {
          const auto p = payload_of();
          auto acc = scratch_floats(accum, n);
          std::fill(acc.begin(), acc.end(), 0.0f);
          run_interleaved(
              s, n,
              {{"kernel", [q, p, acc] { cp::decode_accumulate(cp::cpu::seq, q, p, acc, 0.5f); }},
               copy_ref(gaussian_input(n)),
               floor_ref(p, 2, 0, 4 * n)});
        });
  }

  // --- fused feedback + 4-bit quantize (pipeline API) ------------------------------------------
  const cp::quantize q4{.bits = 4, .granularity = cp::scale_granularity::block, .group = 1024};
  // Reads g, reads and writes the error state (`state` bytes per element), writes the payload.
  const auto feedback_row = [n](const std::string& name, auto pipe, std::size_t state) {
    add(name, "kernel/copy<=1.8", 11, [n, pipe, state](benchmark::State& s) {
      const auto g = gaussian_input(n);
      auto st = std::make_shared<decltype(pipe.make_state(n))>(pipe.make_state(n));
      auto out = scratch(payload, pipe.max_payload_bytes(n));
      auto ws = scratch(workspace, pipe.workspace_bytes(n));
      auto step = std::make_shared<std::uint64_t>(0);
      run_interleaved(s, n,
                      {{"kernel",
                        [pipe, st, g, out, ws, step] {
                          const cp::context ctx{.seed = 1, .step = (*step)++, .tensor_id = 3};
                          cp::encode(cp::cpu::seq, pipe, *st, ctx, g, out, ws);
                        }},
                       copy_ref(g),
                       floor_ref(std::as_bytes(g), 1, pipe.max_payload_bytes(n), state * n)});
    });
  };
  feedback_row("feedback/ef+q4/block1024", cp::pipeline<cp::ef, cp::quantize>{{}, q4}, 4);
  feedback_row("feedback/loco_f32+q4/block1024",
               cp::pipeline<cp::loco<cp::store_f32>, cp::quantize>{{.reset_every = 0}, q4}, 4);
  feedback_row("feedback/loco_int8+q4/block1024",
               cp::pipeline<cp::loco<cp::store_int8>, cp::quantize>{{.reset_every = 0}, q4}, 1);

  // --- sign + scale ------------------------------------------------------------------------------
  add("sign/tensor/mean_abs", "kernel/copy<=0.7", 15, [n](benchmark::State& s) {
    const auto x = gaussian_input(n);
    run_interleaved(s, n,
                    {encode_fn("kernel", cp::sign{}, x), copy_ref(x), read_ref(x),
                     floor_ref(std::as_bytes(x), 1, cp::sign{}.body_bytes(n), 0)});
  });
  add("sign/block1024/mean_abs", "kernel/copy<=0.7", 15, [n](benchmark::State& s) {
    const auto x = gaussian_input(n);
    const cp::sign c{.granularity = cp::sign_granularity::block, .block = 1024};
    run_interleaved(s, n,
                    {encode_fn("kernel", c, x), copy_ref(x), read_ref(x),
                     floor_ref(std::as_bytes(x), 1, c.body_bytes(n), 0)});
  });

  // --- exact top-k vs std::nth_element on the same |x| ----------------------------------------
  for (auto [pct, goals] : {std::pair{1, "nth_element/kernel>=15;kernel/copy<=3"},
                            std::pair{10, "nth_element/kernel>=10;kernel/copy<=5"}}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      const std::string name = "topk/k=" + std::to_string(pct) + "%/seed:" + std::to_string(seed);
      add(name, goals, 5, [n, pct = pct, seed](benchmark::State& s) {
        const auto x = gaussian_input(n, seed);
        const cp::top_k c{.count = n * static_cast<std::uint64_t>(pct) / 100};
        auto a = scratch_floats(keys, n);
        const std::size_t k = c.count;
        run_interleaved(
            s, n,
            {encode_fn("kernel", c, x),
             {"nth_element",
              [a, k] { std::nth_element(a.begin(), a.begin() + (a.size() - k), a.end()); },
              [a, x] {
                for (std::size_t i = 0; i < x.size(); ++i)
                  a[i] = cp::detail::abs(x[i]);
              }},
             copy_ref(x),
             read_ref(x),
             floor_ref(std::as_bytes(x), 1, c.body_bytes(n), 0)});
      });
    }
  }
}

} // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::AddCustomContext("page_policy", commpress_bench::page_policy());
  benchmark::AddCustomContext("elements", std::to_string(bench_elements()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
