// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// Encode and decode throughput of every CPU codec, in bytes of fp32 input per second, next to a
// plain copy of the same bytes measured in the same binary (the memory-bound baseline).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/buffers.hpp"
#include "common/copy.hpp"
#include "commpress/commpress.hpp"

namespace cp = commpress;
using commpress_bench::BM_copy;
using commpress_bench::gaussian_input;
using commpress_bench::scratch;

namespace {

/// The payload checksum alone, each implementation of format/crc32c.hpp: one 64 KiB checksum
/// chunk (three for the three-chain kernel), hashed from L2 as the encoders do, and 256 MiB
/// (192 MiB) from memory.
enum class crc_path { tables, crc32_instruction, crc32_three_chains, folding };

void BM_checksum(benchmark::State& state, crc_path path) {
  namespace cpd = cp::detail;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  auto buf = scratch(0, bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    buf[i] = static_cast<std::byte>(i * 2654435761u >> 13);
  const auto* p = reinterpret_cast<const unsigned char*>(buf.data());
#if defined(COMMPRESS_CRC32C_X86)
  if ((path == crc_path::folding && !cpd::cpu_has_vpclmul()) ||
      (path != crc_path::tables && !cpd::cpu_has_sse42())) {
    state.SkipWithError("this CPU lacks the instructions");
    return;
  }
#else
  if (path != crc_path::tables) {
    state.SkipWithError("x86-64 only");
    return;
  }
#endif
  for (auto _ : state) {
    std::uint32_t crc = 0;
    switch (path) {
    case crc_path::tables:
      crc = cpd::crc32c_portable(~0u, p, bytes);
      break;
#if defined(COMMPRESS_CRC32C_X86)
    case crc_path::crc32_instruction:
      crc = cpd::crc32c_sse42(~0u, p, bytes);
      break;
    case crc_path::crc32_three_chains: {
      std::uint32_t three[3];
      const std::size_t third = bytes / 3;
      cpd::crc32c_sse42_x3(p, p + third, p + 2 * third, third, three);
      crc = three[0] ^ three[1] ^ three[2];
      break;
    }
    case crc_path::folding:
      crc = cpd::crc32c_vpclmul(~0u, p, bytes);
      break;
#else
    default:
      break;
#endif
    }
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

/// The Gaussian input as element type T, each from_float of the fp32 one.
template <class T> std::span<const T> input_as(std::size_t n) {
  const auto& x = gaussian_input(n);
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    static std::map<std::size_t, std::vector<T>> cache;
    auto& v = cache[n];
    if (v.size() != n) {
      v.resize(n);
      for (std::size_t i = 0; i < n; ++i)
        v[i] = cp::from_float<T>(x[i]);
    }
    return v;
  }
}

/// Encode of an input of element type T. GB/s count 4 bytes per element whatever T is, so rows
/// of every input type compare element rates.
template <class T = float, class Codec> void BM_encode(benchmark::State& state, Codec c) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::span<const T> x = input_as<T>(n);
  const auto bytes = cp::max_payload_bytes(c, n);
  auto out = scratch(0, bytes);
  auto ws = scratch(1, cp::workspace_bytes(cp::cpu::seq, c, n));
  cp::context ctx{.seed = 1, .tensor_id = 3};
  std::size_t written = 0; // the payload's bytes: max_payload_bytes, or less for a variable body
  for (auto _ : state) {
    ++ctx.step;
    written = cp::encode(cp::cpu::seq, c, ctx, x, std::span(out).first(bytes), std::span(ws)).bytes;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * n));
  state.counters["payload_per_input"] =
      static_cast<double>(written) / (4.0 * static_cast<double>(n));
}

/// Decode into an output of element type T `offset` bytes past a huge page (a cache line): 0,
/// or 16 as a plain std::vector of 32 MiB or more from glibc's allocator starts. GB/s count 4
/// bytes per element whatever T is, so rows of every output type compare element rates.
template <class T = float, class Codec>
void BM_decode(benchmark::State& state, Codec c, std::size_t offset = 0) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto& x = gaussian_input(n);
  const auto bytes = cp::max_payload_bytes(c, n);
  auto payload = scratch(2, bytes);
  auto ws = scratch(1, cp::workspace_bytes(cp::cpu::seq, c, n));
  const std::size_t written =
      cp::encode(cp::cpu::seq, c, {.seed = 1, .tensor_id = 3}, std::span<const float>(x),
                 std::span(payload).first(bytes), std::span(ws))
          .bytes;
  auto out_bytes = scratch(3, sizeof(T) * n + offset);
  std::span<T> out(reinterpret_cast<T*>(out_bytes.data() + offset), n);
  for (auto _ : state) {
    cp::decode(cp::cpu::seq, c, std::span<const std::byte>(payload).first(written), out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * n));
}

/// The sizes of a row: about 1 Mi and 64 Mi elements.
struct row_sizes {
  std::int64_t about_1mi = 1 << 20;
  std::int64_t about_64mi = 1 << 26;
};

/// Registers the row `row` at its sizes, timed in milliseconds.
template <class Fn> void register_sizes(const std::string& row, Fn fn, row_sizes sizes = {}) {
  benchmark::RegisterBenchmark(row.c_str(), fn)
      ->Arg(sizes.about_1mi)
      ->Arg(sizes.about_64mi)
      ->Unit(benchmark::kMillisecond);
}

template <class Codec> void register_codec(const char* name, Codec c, row_sizes sizes = {}) {
  register_sizes(
      std::string("BM_encode/") + name, [c](benchmark::State& s) { BM_encode(s, c); }, sizes);
  register_sizes(
      std::string("BM_decode/") + name, [c](benchmark::State& s) { BM_decode(s, c); }, sizes);
}

/// roundtrip (x = decode(encode(x)) in place, no payload), of the same input each time: the
/// input is copied back first, and that copy's time counted with it.
template <class Codec> void BM_roundtrip(benchmark::State& state, Codec c) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto& x = gaussian_input(n);
  auto y_bytes = scratch(3, 4 * n);
  std::span<float> y(reinterpret_cast<float*>(y_bytes.data()), n);
  auto ws = scratch(1, cp::workspace_bytes(cp::cpu::seq, c, n));
  cp::context ctx{.seed = 1, .tensor_id = 3};
  for (auto _ : state) {
    ++ctx.step;
    std::copy(x.begin(), x.end(), y.begin());
    cp::roundtrip(cp::cpu::seq, c, ctx, y, std::span(ws));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * n));
}

} // namespace

BENCHMARK(BM_copy)->Arg(1 << 20)->Arg(1 << 26)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_checksum, tables, crc_path::tables)->Arg(1 << 16)->Arg(1 << 28);
BENCHMARK_CAPTURE(BM_checksum, crc32_instruction, crc_path::crc32_instruction)
    ->Arg(1 << 16)
    ->Arg(1 << 28);
BENCHMARK_CAPTURE(BM_checksum, crc32_three_chains, crc_path::crc32_three_chains)
    ->Arg(3 << 16)
    ->Arg(3 << 26);
BENCHMARK_CAPTURE(BM_checksum, folding, crc_path::folding)->Arg(1 << 16)->Arg(1 << 28);

int main(int argc, char** argv) {
  register_codec("identity", cp::identity{});
  register_codec("cast_bf16", cp::cast{.to = cp::dtype::bf16});
  register_codec("cast_f16", cp::cast{.to = cp::dtype::f16});
  using cp::quant_range, cp::rounding, cp::scale_granularity;
  register_codec("quantize_8bit_block128", cp::quantize{.bits = 8, .group = 128});
  register_codec("quantize_4bit_block128", cp::quantize{.bits = 4, .group = 128});
  register_codec("quantize_2bit_block128", cp::quantize{.bits = 2, .group = 128});
  // every second block of 100 starts four elements into a group of eight codes
  register_codec("quantize_4bit_block100", cp::quantize{.bits = 4, .group = 100});
  register_codec("quantize_4bit_block128_stochastic",
                 cp::quantize{.bits = 4, .group = 128, .round = rounding::stochastic});
  register_codec("quantize_4bit_tensor_minmax",
                 cp::quantize{.bits = 4,
                              .granularity = scale_granularity::tensor,
                              .group = 0,
                              .range = quant_range::asymmetric});
  // a scale per column of a 1024-column matrix (elements 1024 apart share it)
  register_codec("quantize_4bit_column1024",
                 cp::quantize{.bits = 4, .granularity = scale_granularity::column, .group = 1024});
  register_codec("quantize_4bit_column1024_minmax",
                 cp::quantize{.bits = 4,
                              .granularity = scale_granularity::column,
                              .group = 1024,
                              .range = quant_range::asymmetric});
  // 1020 columns: every second row starts four elements into a group of eight codes
  register_codec("quantize_4bit_column1020",
                 cp::quantize{.bits = 4, .granularity = scale_granularity::column, .group = 1020},
                 {1020 * 1028, 1020 * 65794});
  register_codec("top_k_1pct", cp::top_k{.fraction = 0.01f});
  register_codec("top_k_10pct", cp::top_k{.fraction = 0.1f});
  // chunked top-k as DeMo / SparseLoCo send it: 2 of every 64 elements, 1-byte indices, and the
  // same selection with 2-bit values (one scale per 64 kept values)
  register_codec("top_k_chunk64_2", cp::top_k{.count = 2, .row_length = 64});
  // 6 of every 64 (9.4%), past the 4 that the small-k selection keeps in registers per lane
  register_codec("top_k_chunk64_6", cp::top_k{.count = 6, .row_length = 64});
  register_codec(
      "top_k_chunk64_2_q2",
      cp::top_k{.count = 2,
                .row_length = 64,
                .value_quantizer = {.bits = 2, .group = 64, .range = quant_range::asymmetric}});
  register_codec("random_k_1pct", cp::random_k{.fraction = 0.01f});
  // random-k at the chunked top-k's density, 1 of every 32 elements, with fp32 values and with
  // 2-bit values (one scale per 64 kept values): no indices either way
  register_codec("random_k_1of32", cp::random_k{.fraction = 1.0f / 32});
  register_codec(
      "random_k_1of32_q2",
      cp::random_k{.fraction = 1.0f / 32,
                   .value_quantizer = {.bits = 2, .group = 64, .range = quant_range::asymmetric}});
  register_codec("sign_rms_tensor", cp::sign{.scale = cp::sign_scale::rms});
  // a scale per block: blocks of 128 start on a byte; every second block of 100 starts four
  // bits into one
  register_codec("sign_block128",
                 cp::sign{.granularity = cp::sign_granularity::block, .block = 128});
  register_codec("sign_block100",
                 cp::sign{.granularity = cp::sign_granularity::block, .block = 100});
  register_codec("fp8_e4m3_block128", cp::fp8{});
  register_codec("fp8_e5m2_tensor", cp::fp8{.format = cp::minifloat::e5m2,
                                            .granularity = cp::scale_granularity::tensor,
                                            .group = 0});
  register_codec("mxfp8", cp::mxfp8{});
  register_codec("mxfp4", cp::mxfp4{});
  register_codec("nvfp4", cp::nvfp4{});
  register_codec("terngrad_tensor", cp::terngrad{});
  register_codec("terngrad_block128_clip", cp::terngrad{.block = 128, .clip_sigmas = 2.5f});
  register_codec("natural_tensor", cp::natural{});
  register_codec("qsgd8_block512", cp::qsgd8{.block = 512});
  register_codec("qsgd4_tensor", cp::qsgd4{});
  register_codec("qsgd2_tensor", cp::qsgd2{});
  // the same levels and draws with the paper's Elias coding (s = 127, 7, 1): a variable body,
  // whose payload_per_input is that of the last encode
  const auto elias = cp::qsgd_coding::elias;
  register_codec("qsgd8_block512_elias", cp::qsgd8{.block = 512, .coding = elias});
  register_codec("qsgd4_tensor_elias", cp::qsgd4{.coding = elias});
  register_codec("qsgd2_tensor_elias", cp::qsgd2{.coding = elias});
  // Outputs off a cache line, as from std::vector<float>: quantize, and codecs of the kit with
  // codes narrower than a byte, minifloat codes and byte codes.
  const auto off_line = [](const char* name, auto c) {
    benchmark::RegisterBenchmark((std::string("BM_decode_off_line/") + name).c_str(),
                                 [c](benchmark::State& s) { BM_decode(s, c, 16); })
        ->Arg(1 << 26)
        ->Unit(benchmark::kMillisecond);
  };
  off_line("quantize_4bit_block128", cp::quantize{.bits = 4, .group = 128});
  off_line("fp8_e4m3_block128", cp::fp8{});
  off_line("mxfp4", cp::mxfp4{});
  off_line("qsgd4_tensor", cp::qsgd4{});
  off_line("natural_tensor", cp::natural{});
  off_line("qsgd8_block512", cp::qsgd8{.block = 512});
  // roundtrip, as a simulated link or the activations of a pipeline stage take it: blocks on
  // a multiple of 8 and off one.
  const auto roundtrip = [](const char* name, auto c) {
    register_sizes(std::string("BM_roundtrip/") + name,
                   [c](benchmark::State& s) { BM_roundtrip(s, c); });
  };
  roundtrip("quantize_4bit_block128", cp::quantize{.bits = 4, .group = 128});
  roundtrip("quantize_4bit_block100", cp::quantize{.bits = 4, .group = 100});
  roundtrip("quantize_4bit_block100_stochastic",
            cp::quantize{.bits = 4, .group = 100, .round = rounding::stochastic});
  // 16-bit inputs and outputs, as a bf16 or fp16 model's gradients are.
  const auto to_16_bits = [](const char* name, auto c) {
    register_sizes(std::string("BM_encode_bf16/") + name,
                   [c](benchmark::State& s) { BM_encode<cp::bfloat16>(s, c); });
    register_sizes(std::string("BM_encode_f16/") + name,
                   [c](benchmark::State& s) { BM_encode<cp::half>(s, c); });
    register_sizes(std::string("BM_decode_bf16/") + name,
                   [c](benchmark::State& s) { BM_decode<cp::bfloat16>(s, c); });
    register_sizes(std::string("BM_decode_f16/") + name,
                   [c](benchmark::State& s) { BM_decode<cp::half>(s, c); });
  };
  to_16_bits("quantize_4bit_block128", cp::quantize{.bits = 4, .group = 128});
  to_16_bits("quantize_4bit_block100", cp::quantize{.bits = 4, .group = 100});
  to_16_bits("fp8_e4m3_block128", cp::fp8{});
  to_16_bits("qsgd8_block512", cp::qsgd8{.block = 512});
  to_16_bits("quantize_4bit_tensor_minmax", cp::quantize{.bits = 4,
                                                         .granularity = scale_granularity::tensor,
                                                         .group = 0,
                                                         .range = quant_range::asymmetric});
  to_16_bits("sign_rms_tensor", cp::sign{.scale = cp::sign_scale::rms});
  to_16_bits("top_k_1pct", cp::top_k{.fraction = 0.01f});
  to_16_bits("top_k_chunk64_2", cp::top_k{.count = 2, .row_length = 64});
  to_16_bits("random_k_1pct", cp::random_k{.fraction = 0.01f});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
