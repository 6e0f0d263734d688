// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// What the randomized Hadamard rotation (rotated<C>) costs and buys, in one run: for each input
// (Gaussian; Gaussian with a 40-sigma outlier every 200 elements; Student-t with 2 degrees of
// freedom) and codec, the roundtrip of the codec alone and of the rotated codec, in bytes of
// fp32 input per second, with the relative squared error ||C(x) - x||^2 / ||x||^2 of each as
// the counter `rel_err`. A plain copy of the same bytes is the memory baseline.

#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/buffers.hpp"
#include "common/copy.hpp"
#include "commpress/commpress.hpp"

namespace cp = commpress;
using commpress_bench::BM_copy;
using commpress_bench::scratch;

namespace {

enum class input { gaussian, outliers, student_t };

const std::vector<float>& input_of(input kind, std::size_t n) {
  static std::map<std::pair<input, std::size_t>, std::vector<float>> cache;
  auto [it, fresh] = cache.try_emplace({kind, n});
  if (fresh) {
    std::mt19937 gen(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::student_t_distribution<float> heavy(2.0f);
    std::vector<float>& x = it->second;
    x.resize(n);
    for (float& v : x)
      v = kind == input::student_t ? heavy(gen) : normal(gen);
    if (kind == input::outliers)
      for (std::size_t i = 100; i < n; i += 200)
        x[i] = x[i] < 0 ? -40.0f : 40.0f;
  }
  return it->second;
}

template <class Codec> void BM_roundtrip(benchmark::State& state, Codec c, input kind) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float>& x = input_of(kind, n);
  auto y = commpress_bench::scratch_floats(1, n);
  auto ws = scratch(2, cp::workspace_bytes(cp::cpu::seq, c, n));
  const cp::context ctx{.seed = 1};
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), 4 * n);
    cp::roundtrip(cp::cpu::seq, c, ctx, y, ws);
    benchmark::DoNotOptimize(y.data());
  }
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
    norm += static_cast<double>(x[i]) * x[i];
  }
  state.counters["rel_err"] = err / norm;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * n));
}

template <class Codec> void register_pair(const char* name, Codec c) {
  const std::pair<input, const char*> inputs[] = {{input::gaussian, "gaussian"},
                                                  {input::outliers, "outliers"},
                                                  {input::student_t, "student_t"}};
  for (const auto& [kind, kind_name] : inputs) {
    const std::string suffix = std::string(name) + "/" + kind_name;
    benchmark::RegisterBenchmark(("BM_roundtrip/plain/" + suffix).c_str(),
                                 [c, kind](benchmark::State& s) { BM_roundtrip(s, c, kind); })
        ->Arg(1 << 20)
        ->Unit(benchmark::kMillisecond);
    for (std::uint8_t log2 : {std::uint8_t{6}, std::uint8_t{8}, std::uint8_t{10}}) {
      const cp::rotated<Codec> r{c, log2};
      benchmark::RegisterBenchmark(
          ("BM_roundtrip/rotated" + std::to_string(1 << log2) + "/" + suffix).c_str(),
          [r, kind](benchmark::State& s) { BM_roundtrip(s, r, kind); })
          ->Arg(1 << 20)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

} // namespace

BENCHMARK(BM_copy)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  using cp::scale_granularity;
  register_pair("quantize_4bit_tensor",
                cp::quantize{.bits = 4, .granularity = scale_granularity::tensor, .group = 0});
  register_pair("quantize_4bit_block256", cp::quantize{.bits = 4, .group = 256});
  register_pair("quantize_2bit_block256", cp::quantize{.bits = 2, .group = 256});
  register_pair("sign_tensor", cp::sign{});
  register_pair("mxfp4", cp::mxfp4{});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
