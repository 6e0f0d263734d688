// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// The streaming fast paths of backend/cpu/detail/ (the kernels over the vector layer of
// detail/simd.hpp) against the per-element definitions of compress/*.hpp, on inputs large and
// awkward enough to reach every branch of them: long top-k rows (the sampled threshold), sign
// groups of several canonical chunks, NaN and Inf in some groups only. Built by
// tests/CMakeLists.txt with the default flags (the portable layer), with -march=native
// (AVX2/AVX-512/F16C) and, where that has AVX-512, with -march=x86-64-v3 (the
// AVX2 vector layer).

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/philox.hpp"
#include "commpress/backend/cpu/detail/reduce.hpp"
#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/format/bit_packing.hpp"
#include "streamed_output_checks.hpp"

namespace cp = commpress;

// The compress_avx2 tests (tests/CMakeLists.txt) exist to run the AVX2 kernels.
#if defined(COMMPRESS_TEST_EXPECT_AVX2) && !defined(COMMPRESS_SIMD_AVX2)
#error "built for the AVX2 vector layer, but core/cpu_features.hpp did not select it"
#endif

namespace {

std::vector<float> sample(std::size_t n, std::uint32_t stream) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(11, stream);
  for (std::size_t i = 0; i < n; ++i)
    x[i] =
        (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f) * static_cast<float>(1 + i % 53);
  return x;
}

std::vector<std::byte> encode_all(const auto& c, const cp::context& ctx,
                                  const std::vector<float>& x) {
  std::vector<std::byte> out(cp::max_payload_bytes(c, x.size()));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
  cp::encode(cp::cpu::seq, c, ctx, std::span<const float>(x), out, ws);
  return out;
}

const unsigned char* body_of(const std::vector<std::byte>& payload) {
  return reinterpret_cast<const unsigned char*>(payload.data()) + cp::format::header_bytes;
}

/// The words of the record at `at` that differ from make_record(range, bits, s0, s1).
std::size_t record_mismatches(cp::quant_range range, unsigned bits, float s0, float s1,
                              const unsigned char* at) {
  const auto rec = cp::quantize::make_record(range, bits, s0, s1);
  std::size_t differ = std::memcmp(at, &rec.a, 4) != 0 ? 1u : 0u;
  if (range == cp::quant_range::asymmetric)
    differ += std::memcmp(at + 4, &rec.b, 4) != 0 ? 1u : 0u;
  return differ;
}

std::uint32_t key_of(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u & 0x7fffffffu;
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE_TEMPLATE("group statistics: max_magnitude_bits and value_range equal their "
                     "definitions on every length and on edge values",
                     T, float, cp::bfloat16, cp::half) {
    // Bit patterns that stress the orders: signed zeros, denormals, the largest finite values,
    // infinities and NaNs with payloads of either sign, and ordinary values.
    const std::uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u,
                                   0x007fffffu, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu,
                                   0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                   0x7f800001u, 0x3f800000u, 0xbf800000u, 0x42c80000u};
    const auto key = cp::make_rng_key(3, 4);
    // Every length to 70, and lengths about the element loop's blocks of 256.
    std::vector<std::size_t> lengths;
    for (std::size_t n = 0; n <= 70; ++n)
      lengths.push_back(n);
    for (std::size_t n : {255, 256, 257, 513, 1024})
      lengths.push_back(n);
    std::size_t wrong = 0;
    std::size_t cases = 0;
    for (std::size_t n : lengths)
      for (std::uint64_t trial = 0; trial < 24; ++trial) {
        // Trials 0-7 hold finite values only; the rest may hold Inf or NaN. Trials 1, 4, 7, ...
        // hold negative patterns only and trials 2, 5, 8, ... non-negative ones only (the
        // least and greatest unsigned patterns then give the greatest and least values).
        std::vector<T> x(n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint32_t r = cp::random_u32(key, trial * 100 + n, i);
          std::uint32_t bits = edges[r % 16];
          if (r % 3 == 0)
            bits = cp::detail::float_to_bits((cp::uniform_from_bits(r) - 0.5f) *
                                             static_cast<float>(1 + trial));
          if (trial < 8 && (bits & 0x7fffffffu) >= 0x7f800000u)
            bits = 0x3f800000u;
          if (trial % 3 == 1)
            bits |= 0x80000000u;
          else if (trial % 3 == 2)
            bits &= 0x7fffffffu;
          x[i] = cp::from_float<T>(cp::detail::bits_to_float(bits));
        }
        // The definitions, on the elements read as fp32.
        std::uint32_t most = 0;
        bool finite = true;
        float lo = 0.0f, hi = 0.0f;
        for (std::size_t i = 0; i < n; ++i) {
          const float v = cp::to_float(x[i]);
          const std::uint32_t u = cp::detail::float_to_bits(v);
          most = std::max(most, u & 0x7fffffffu);
          finite = finite && std::isfinite(v);
          // The least, -0 before +0; the greatest, +0 after -0.
          if (i == 0 || v < lo || (v == lo && std::signbit(v)))
            lo = v;
          if (i == 0 || v > hi || (v == hi && !std::signbit(v)))
            hi = v;
        }
        ++cases;
        wrong += cp::cpu::detail::max_magnitude_bits(x.data(), n) != most ? 1u : 0u;
        if (n == 0)
          continue;
        const auto r = cp::cpu::detail::value_range(x.data(), n);
        if (r.finite != finite)
          ++wrong;
        else if (finite && (cp::detail::float_to_bits(r.lo) != cp::detail::float_to_bits(lo) ||
                            cp::detail::float_to_bits(r.hi) != cp::detail::float_to_bits(hi)))
          ++wrong;
      }
    CHECK(cases == lengths.size() * 24);
    CHECK(wrong == 0);
  }

  TEST_CASE("quantize: block and tensor payloads equal the per-element definition for every "
            "bit width, both ranges and both roundings") {
    const std::size_t n = 4 * 4096 + 1000 + 5; // a short last block and a tail of 5 codes
    std::vector<float> x = sample(n, 1);
    x[2 * 1024 + 17] = std::numeric_limits<float>::quiet_NaN(); // one poisoned block
    // Blocks whose least or greatest value is a zero of either sign, in either order (the fast
    // path orders -0 below +0, the definition keeps the first), a constant block and a zero one.
    for (std::size_t i = 3 * 1024; i < 4 * 1024; ++i)
      x[i] = i % 2 == 0 ? -0.0f : 0.0f;
    for (std::size_t i = 4 * 1024; i < 5 * 1024; ++i)
      x[i] = i % 3 == 0 ? 0.0f : (i % 3 == 1 ? -0.0f : -std::fabs(x[i]));
    for (std::size_t i = 5 * 1024; i < 6 * 1024; ++i)
      x[i] = i % 2 == 0 ? std::fabs(x[i]) + 1.0f : (i % 4 == 1 ? 0.0f : -0.0f);
    for (std::size_t i = 6 * 1024; i < 7 * 1024; ++i)
      x[i] = 2.5f;
    for (std::size_t i = 7 * 1024; i < 8 * 1024; ++i) // all negative, then all positive
      x[i] = -std::fabs(x[i]) - 0.5f;
    for (std::size_t i = 8 * 1024; i < 9 * 1024; ++i)
      x[i] = std::fabs(x[i]) + 0.5f;
    x[9 * 1024 + 3] = -std::numeric_limits<float>::infinity(); // poisoned by negative patterns
    x[10 * 1024 + 700] = -std::numeric_limits<float>::quiet_NaN();
    const cp::context ctx{.seed = 3, .step = 9, .tensor_id = 4};
    for (auto range : {cp::quant_range::symmetric, cp::quant_range::asymmetric})
      for (unsigned bits = range == cp::quant_range::symmetric ? 2 : 1; bits <= 8; ++bits)
        for (auto round : {cp::rounding::nearest, cp::rounding::stochastic})
          // Blocks shorter than a batch (NaN and Inf groups at a batch's start and in its
          // middle), of 100 elements (groups that start off a multiple of 8), of 13 and 5
          // (groups of eight codes that straddle two or three groups), and blocks of a batch
          // each.
          for (std::uint32_t group : {0u, 24u, 100u, 13u, 5u, 128u, 1024u}) {
            CAPTURE(range);
            CAPTURE(bits);
            CAPTURE(round);
            CAPTURE(group);
            const cp::quantize q{.bits = bits,
                                 .granularity = group == 0 ? cp::scale_granularity::tensor
                                                           : cp::scale_granularity::block,
                                 .group = group,
                                 .range = range,
                                 .round = round};
            const auto payload = encode_all(q, ctx, x);
            const unsigned char* body = body_of(payload);
            const std::size_t len = group == 0 ? n : group;
            const std::size_t groups = (n + len - 1) / len;
            const std::size_t record_bytes = q.record_bytes();
            const unsigned char* codes = body + record_bytes * groups;
            std::size_t mismatches = 0;
            for (std::size_t g = 0; g < groups; ++g) {
              const std::size_t begin = g * len;
              const std::size_t end = std::min(n, begin + len);
              // The definition's statistics: absmax, or min and max by first occurrence.
              float s0 = range == cp::quant_range::symmetric
                             ? 0.0f
                             : std::numeric_limits<float>::infinity();
              float s1 = -std::numeric_limits<float>::infinity();
              bool poisoned = false;
              for (std::size_t i = begin; i < end; ++i) {
                poisoned |= !std::isfinite(x[i]);
                if (range == cp::quant_range::symmetric) {
                  s0 = std::max(s0, std::fabs(x[i]));
                } else {
                  s0 = x[i] < s0 ? x[i] : s0;
                  s1 = x[i] > s1 ? x[i] : s1;
                }
              }
              if (poisoned)
                s0 = s1 = std::numeric_limits<float>::quiet_NaN();
              mismatches += record_mismatches(range, bits, s0, s1, body + record_bytes * g);
              const auto k = cp::quantize::make_coder(range, bits, s0, s1);
              for (std::size_t i = begin; i < end; ++i) {
                const std::uint32_t want =
                    round == cp::rounding::nearest
                        ? cp::quantize::encode_nearest(range, bits, x[i], k)
                        : cp::quantize::encode_stochastic(
                              range, bits, x[i], k,
                              cp::uniform_from_bits(cp::random_u32(ctx.key(), ctx.step, i)));
                mismatches += cp::detail::unpack_one(codes, i, bits) != want ? 1u : 0u;
              }
            }
            CHECK(mismatches == 0);
          }
  }

  TEST_CASE("quantize: column payloads, decode and decode_accumulate equal the per-element "
            "definition, for tiles of columns and column counts on and off a multiple of 8") {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // 8, 24 and 72 columns (fewer than a vector of lanes past whole ones, or none), 264, 328 and
    // 520 (whole tiles of 256 and a part one); rows, and tiles, that start inside a byte of
    // codes: 33 (every lead), 300 (a second tile of 44), 259 (a second tile of 3, odd leads) and
    // 5 (several rows in one byte); one row and 37. Each with finite inputs (every tile through
    // the kernels), with a NaN and an Inf (their tiles element by element), and with a wide
    // asymmetric column alone.
    for (std::size_t cols : {8u, 24u, 72u, 264u, 328u, 520u, 33u, 300u, 259u, 5u})
      for (std::size_t rows : {37u, 1u})
        for (int inputs : {0, 1, 2}) {
          const bool clean = inputs == 0;
          const std::size_t n = rows * cols;
          std::vector<float> x = sample(n, 7);
          // Columns of edge values: zeros of both signs in either order, a constant, an absmax
          // whose inverse overflows (its codes the zero level), subnormals, and values near the
          // float maximum of one sign (not wide).
          for (std::size_t r = 0; r < rows; ++r) {
            float* row = x.data() + r * cols;
            const float edge[] = {row[0],
                                  r % 2 == 0 ? -0.0f : 0.0f,
                                  2.5f,
                                  row[3 % cols],
                                  r % 3 == 0 ? 0.0f : -0.0f,
                                  row[5 % cols] * 1e-38f,
                                  row[6 % cols] * 1e-41f,
                                  3.3e38f - static_cast<float>(r) * 1e36f};
            for (std::size_t j = 1; j < 8 && j < cols; ++j)
              row[j] = edge[j];
          }
          if (inputs == 1) {
            x[(rows - 1) * cols + 3] = nan; // column 3: a poisoned column in the first tile
            if (cols > 260)
              x[(rows - 1) * cols + 259] = -inf; // column 259, in the second tile
          }
          if (inputs == 2 && rows > 1) { // column 300 % cols: a wide asymmetric column
            x[0 * cols + 300 % cols] = -3e38f;
            x[1 * cols + 300 % cols] = 3e38f;
          }
          for (auto policy :
               {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count})
            for (auto range : {cp::quant_range::symmetric, cp::quant_range::asymmetric})
              for (unsigned bits : {1u, 2u, 3u, 4u, 8u})
                for (auto round : {cp::rounding::nearest, cp::rounding::stochastic}) {
                  if ((range == cp::quant_range::symmetric && bits == 1) ||
                      (clean && policy != cp::nonfinite_policy::propagate))
                    continue;
                  CAPTURE(cols);
                  CAPTURE(clean);
                  CAPTURE(policy);
                  CAPTURE(range);
                  CAPTURE(bits);
                  CAPTURE(round);
                  const cp::quantize q{.bits = bits,
                                       .granularity = cp::scale_granularity::column,
                                       .group = static_cast<std::uint32_t>(cols),
                                       .range = range,
                                       .round = round};
                  const cp::context ctx{
                      .seed = 3, .step = 9, .tensor_id = 4, .on_nonfinite = policy};
                  const auto payload = encode_all(q, ctx, x);
                  // Every bit of the payload is written: into a buffer of ones, the same bytes.
                  std::vector<std::byte> dirty(payload.size(), std::byte{0xff});
                  cp::encode(cp::cpu::seq, q, ctx, std::span<const float>(x), dirty);
                  CHECK(dirty == payload);
                  const unsigned char* body = body_of(payload);
                  const std::size_t record_bytes = q.record_bytes();
                  const unsigned char* codes = body + record_bytes * cols;
                  const bool zero = policy == cp::nonfinite_policy::zero_and_count;
                  const auto screened = [&](float v) {
                    return zero && !std::isfinite(v) ? 0.0f : v;
                  };
                  std::size_t mismatches = 0;
                  for (std::size_t j = 0; j < cols; ++j) {
                    // The definition's statistics, in row order: absmax, or min and max by first
                    // occurrence; a NaN or Inf poisons its column unless screened to 0.
                    float s0 = range == cp::quant_range::symmetric ? 0.0f : inf;
                    float s1 = -inf;
                    bool poisoned = false;
                    for (std::size_t r = 0; r < rows; ++r) {
                      const float v = x[r * cols + j];
                      poisoned |= !zero && !std::isfinite(v);
                      if (std::isnan(screened(v)))
                        continue;
                      if (range == cp::quant_range::symmetric) {
                        s0 = std::max(s0, std::fabs(screened(v)));
                      } else {
                        s0 = screened(v) < s0 ? screened(v) : s0;
                        s1 = screened(v) > s1 ? screened(v) : s1;
                      }
                    }
                    if (poisoned)
                      s0 = s1 = nan;
                    mismatches += record_mismatches(range, bits, s0, s1, body + record_bytes * j);
                    const auto k = cp::quantize::make_coder(range, bits, s0, s1);
                    for (std::size_t r = 0; r < rows; ++r) {
                      const std::size_t i = r * cols + j;
                      const std::uint32_t want =
                          round == cp::rounding::nearest
                              ? cp::quantize::encode_nearest(range, bits, screened(x[i]), k)
                              : cp::quantize::encode_stochastic(
                                    range, bits, screened(x[i]), k,
                                    cp::uniform_from_bits(cp::random_u32(ctx.key(), ctx.step, i)));
                      mismatches += cp::detail::unpack_one(codes, i, bits) != want ? 1u : 0u;
                    }
                  }
                  CHECK(mismatches == 0);
                  // Decode and decode_accumulate, under seq and under par on element ranges that
                  // start and end inside rows.
                  std::vector<float> want(n), want_acc(n, 0.75f);
                  for (std::size_t i = 0; i < n; ++i) {
                    float rec[2] = {};
                    std::memcpy(rec, body + record_bytes * (i % cols), record_bytes);
                    want[i] = cp::quantize::decode_value(
                        range, bits, cp::detail::unpack_one(codes, i, bits), {rec[0], rec[1]});
                    want_acc[i] = cp::detail::add_rn(0.75f, cp::detail::mul_rn(-0.5f, want[i]));
                  }
                  // par's ranges of 64 elements start and end inside the longer rows; those of
                  // 1024 hold whole rows (where the tensor has two ranges of them at least).
                  for (int p = 0; p < 3; ++p) {
                    const cp::cpu::par_t par{.threads = 3, .grain = p == 1 ? 64u : 1024u};
                    std::vector<float> out(n), acc(n, 0.75f);
                    if (p == 0) {
                      cp::decode(cp::cpu::seq, q, payload, std::span<float>(out));
                      cp::decode_accumulate(cp::cpu::seq, q, payload, std::span<float>(acc), -0.5f);
                    } else {
                      cp::decode(par, q, payload, std::span<float>(out));
                      cp::decode_accumulate(par, q, payload, std::span<float>(acc), -0.5f);
                    }
                    CHECK(std::memcmp(out.data(), want.data(), 4 * n) == 0);
                    CHECK(std::memcmp(acc.data(), want_acc.data(), 4 * n) == 0);
                  }
                  // 16-bit outputs hold from_float of the fp32 values.
                  std::vector<cp::bfloat16> out16(n);
                  cp::decode(cp::cpu::seq, q, payload, std::span<cp::bfloat16>(out16));
                  std::size_t wrong16 = 0;
                  for (std::size_t i = 0; i < n; ++i) {
                    const auto v16 = cp::from_float<cp::bfloat16>(want[i]);
                    wrong16 += std::memcmp(&out16[i], &v16, 2) != 0 ? 1u : 0u;
                  }
                  CHECK(wrong16 == 0);
                  // A 16-bit input encodes as its fp32 values do.
                  std::vector<cp::bfloat16> x16(n);
                  std::vector<float> widened(n);
                  for (std::size_t i = 0; i < n; ++i) {
                    x16[i] = cp::from_float<cp::bfloat16>(x[i]);
                    widened[i] = cp::to_float(x16[i]);
                  }
                  std::vector<std::byte> payload16(cp::max_payload_bytes(q, n));
                  const std::size_t nonfinite = static_cast<std::size_t>(
                      std::count_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); }));
                  CHECK(cp::encode(cp::cpu::seq, q, ctx, std::span<const cp::bfloat16>(x16),
                                   payload16)
                            .nonfinite == nonfinite);
                  CHECK(std::memcmp(body_of(payload16), body_of(encode_all(q, ctx, widened)),
                                    q.body_bytes(n)) == 0);
                  // roundtrip equals decode(encode), and counts the same NaN and Inf.
                  std::vector<float> y = x;
                  CHECK(cp::roundtrip(cp::cpu::seq, q, ctx, std::span<float>(y), {}).nonfinite ==
                        nonfinite);
                  std::vector<float> decoded(n);
                  cp::decode(cp::cpu::seq, q, payload, std::span<float>(decoded));
                  CHECK(std::memcmp(y.data(), decoded.data(), 4 * n) == 0);
                }
        }
    // A body of more than three checksum chunks, whose codes are announced once all are
    // written: decode checks its checksum.
    const std::size_t cols = 1024, rows = 256, n = cols * rows;
    const std::vector<float> x = sample(n, 8);
    const cp::quantize q{.bits = 8, .granularity = cp::scale_granularity::column, .group = 1024};
    REQUIRE(q.body_bytes(n) > 3 * cp::format::checksum_chunk_bytes);
    const auto payload = encode_all(q, {}, x);
    std::vector<float> decoded(n), y = x;
    cp::decode(cp::cpu::seq, q, payload, std::span<float>(decoded));
    cp::roundtrip(cp::cpu::seq, q, {}, std::span<float>(y), {});
    CHECK(std::memcmp(y.data(), decoded.data(), 4 * n) == 0);
  }

  TEST_CASE("quantize: Philox words drawn many blocks at a time equal random_block, across the "
            "carry into the counter's high word") {
    const cp::rng_key key = cp::make_rng_key(5, 6);
    constexpr std::size_t most = cp::cpu::detail::code_chunk / 4; // blocks per call
    alignas(64) std::uint32_t words[cp::cpu::detail::code_chunk];
    std::size_t mismatches = 0;
    for (std::uint64_t step : {std::uint64_t{0}, std::uint64_t{9}, std::uint64_t{0x100000007}})
      for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{3}, std::uint64_t{0xfffffff0},
                                  std::uint64_t{0xfffffffd}, std::uint64_t{0x7654321012}})
        for (std::size_t blocks = 1; blocks <= most; ++blocks) {
          cp::cpu::detail::philox_words(key, step, first, blocks, words);
          for (std::size_t w = 0; w < 4 * blocks; ++w)
            mismatches += words[w] != cp::random_block(key, step, first + w / 4).v[w % 4] ? 1u : 0u;
        }
    CHECK(mismatches == 0);
  }

  TEST_CASE("quantize: decode and decode_accumulate equal the per-element definition for both "
            "ranges, for blocks on and off a multiple of 8") {
    const std::size_t n = 3 * 1024 + 13;
    std::vector<float> x = sample(n, 2);
    x[1024 + 5] = std::numeric_limits<float>::infinity(); // a poisoned block: NaN records
    // A block spanning most of the float range (a wide asymmetric record), which starts off a
    // multiple of 8 for blocks of 100, 13 and 3 (at 2100, 2093 and 2100).
    x[2100] = -3e38f;
    x[2101] = 3e38f;
    for (auto range : {cp::quant_range::symmetric, cp::quant_range::asymmetric})
      for (unsigned bits : {1u, 2u, 3u, 4u, 8u})
        for (std::uint32_t group : {1024u, 100u, 13u, 3u}) {
          if (range == cp::quant_range::symmetric && bits == 1)
            continue;
          CAPTURE(range);
          CAPTURE(bits);
          CAPTURE(group);
          const cp::quantize q{.bits = bits, .group = group, .range = range};
          const auto payload = encode_all(q, {}, x);
          std::vector<float> out(n), acc(n, 0.75f);
          // NaN accumulators with payloads: the result is the canonical NaN of add_rn, whichever
          // NaN x86 arithmetic would pass through (CUDA parity depends on it).
          for (std::size_t i = 5; i < n; i += 97)
            acc[i] = cp::detail::bits_to_float(i % 2 ? 0x7fa00001u : 0xffc00123u);
          const std::vector<float> acc0 = acc;
          cp::decode(cp::cpu::seq, q, payload, std::span<float>(out));
          cp::decode_accumulate(cp::cpu::seq, q, payload, std::span<float>(acc), -0.5f);
          const unsigned char* body = body_of(payload);
          const std::size_t record_bytes = q.record_bytes();
          std::size_t mismatches = 0;
          for (std::size_t i = 0; i < n; ++i) {
            float rec[2] = {};
            std::memcpy(rec, body + record_bytes * (i / group), record_bytes);
            const float v = cp::quantize::decode_value(
                range, bits,
                cp::detail::unpack_one(body + record_bytes * ((n + group - 1) / group), i, bits),
                {rec[0], rec[1]});
            const float a = cp::detail::add_rn(acc0[i], cp::detail::mul_rn(-0.5f, v));
            mismatches += (std::memcmp(&out[i], &v, 4) != 0 || std::memcmp(&acc[i], &a, 4) != 0);
          }
          CHECK(mismatches == 0);
          // Values of ranges taken back run by run (a transform adapter's windows, top_k's and
          // random_k's kept values), from and to any element.
          for (const auto& [first, last] : {std::pair<std::size_t, std::size_t>{0, n},
                                            {5, 6},
                                            {3, 1029},
                                            {2093, 2200},
                                            {1000, n}}) {
            std::vector<float> values(last - first + 1, 42.0f); // one guard after the range
            cp::cpu::detail::decode_values(q, n, body, first, last, values.data());
            CHECK(std::memcmp(values.data(), out.data() + first, 4 * (last - first)) == 0);
            CHECK(values.back() == 42.0f);
          }
        }
  }

  TEST_CASE("quantize: decode of records no encoder writes (NaN with a payload, infinite, "
            "overflowing) equals the per-element definition") {
    // decode_codes takes a finite record's groups in its store mode (no canonicalisation) and
    // any other record's in store_canonical, which canonicalises every NaN it computes. Blocks
    // of 100 and 13 are decoded a batch of groups at a time, which a group with such a record
    // ends (to store), and whose records are applied after the levels (to accumulate).
    const std::size_t n = 6 * 256 + 8;
    const std::vector<float> x = sample(n, 9);
    const float inf = std::numeric_limits<float>::infinity();
    const float records[][2] = {
        {cp::detail::bits_to_float(0xffc00123u), 0.5f},  // negative NaN, with a payload
        {0.25f, cp::detail::bits_to_float(0x7fa00001u)}, // signalling NaN second word
        {inf, 0.5f},                                     // code * Inf: NaN at the zero level
        {-3e38f, 3e38f},                                 // finite, the products overflow
        {-inf, -inf},
        {1.5f, 0.125f}};
    for (auto range : {cp::quant_range::symmetric, cp::quant_range::asymmetric})
      for (unsigned bits : {2u, 3u, 4u, 8u})
        for (std::uint32_t group : {256u, 100u, 13u}) {
          CAPTURE(range);
          CAPTURE(bits);
          CAPTURE(group);
          const cp::quantize q{.bits = bits, .group = group, .range = range};
          auto payload = encode_all(q, {}, x);
          auto* body = reinterpret_cast<unsigned char*>(payload.data()) + cp::format::header_bytes;
          const std::size_t record_bytes = q.record_bytes();
          for (std::size_t g = 0; g < q.n_groups(n); ++g)
            std::memcpy(body + record_bytes * g, records[g % 6], record_bytes);
          cp::format::seal(std::span(payload), q.body_bytes(n));
          std::vector<float> out(n), acc(n, 0.75f);
          cp::decode(cp::cpu::seq, q, payload, std::span<float>(out));
          cp::decode_accumulate(cp::cpu::seq, q, payload, std::span<float>(acc), 2.0f);
          std::size_t mismatches = 0, nans = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const float* rec = records[(i / group) % 6];
            const float v = cp::quantize::decode_value(
                range, bits, cp::detail::unpack_one(body + record_bytes * q.n_groups(n), i, bits),
                {rec[0], rec[1]});
            const float a = cp::detail::add_rn(0.75f, cp::detail::mul_rn(2.0f, v));
            mismatches += (std::memcmp(&out[i], &v, 4) != 0 || std::memcmp(&acc[i], &a, 4) != 0);
            nans += std::isnan(out[i]) ? 1u : 0u;
          }
          CHECK(mismatches == 0);
          CHECK(nans > 0); // the NaN records reached the output, canonical
        }
  }

  TEST_CASE("quantize and cast: outputs large enough for streaming stores, and bodies of many "
            "checksum chunks, equal the per-element definition") {
    // Above cpu::detail::streaming_store_min_bytes of fp32 output, with a short last block.
    const std::size_t n = cp::cpu::detail::streaming_store_min_bytes / 4 + 3 * 1024 + 40;
    const std::vector<float> x = sample(n, 5);
    // Outputs on a cache line and 1, 4 and 15 floats past one (a line then straddles two runs
    // of 64), under cpu::seq and cpu::par; groups of 80 end a run of 64 early in every group,
    // and groups of 100 are decoded a window of groups at a time, then streamed.
    constexpr float untouched = 42.0f;
    std::vector<float> storage(n + 64);
    float* aligned = storage.data();
    while (reinterpret_cast<std::uintptr_t>(aligned) % 64 != 0)
      ++aligned;
    for (std::size_t offset : {0u, 1u, 4u, 15u}) {
      const std::span<float> out(aligned + offset, n);
      for (unsigned bits : {2u, 4u, 8u})
        for (std::uint32_t group : {0u, 80u, 100u, 1024u}) {
          CAPTURE(offset);
          CAPTURE(bits);
          CAPTURE(group);
          const cp::quantize q{.bits = bits,
                               .granularity = group == 0 ? cp::scale_granularity::tensor
                                                         : cp::scale_granularity::block,
                               .group = group};
          const auto payload = encode_all(q, {}, x); // decode validates the streamed checksum
          std::fill(storage.begin(), storage.end(), untouched);
          if (offset % 2 == 0)
            cp::decode(cp::cpu::seq, q, payload, out);
          else
            cp::decode(cp::cpu::par_t{.threads = 2, .grain = 1000}, q, payload, out);
          CHECK(std::all_of(aligned, out.data(), [](float v) { return v == untouched; }));
          CHECK(std::all_of(out.data() + n, out.data() + n + 16,
                            [](float v) { return v == untouched; }));
          const std::size_t len = group == 0 ? n : group;
          const std::size_t groups = (n + len - 1) / len;
          const unsigned char* body = body_of(payload);
          std::size_t mismatches = 0;
          for (std::size_t i = 0; i < n; ++i) {
            float scale;
            std::memcpy(&scale, body + 4 * (i / len), 4);
            const float v = cp::quantize::decode_value(
                q.range, bits, cp::detail::unpack_one(body + 4 * groups, i, bits), {scale, 0.0f});
            mismatches += std::memcmp(&out[i], &v, 4) != 0 ? 1u : 0u;
          }
          CHECK(mismatches == 0);
        }
    }
    for (auto to : {cp::dtype::bf16, cp::dtype::f16}) {
      const cp::cast c{.to = to};
      const auto payload = encode_all(c, {}, x);
      CHECK_NOTHROW(cp::format::validate_envelope(payload));
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < n; i += 7) {
        std::uint16_t code;
        std::memcpy(&code, body_of(payload) + 2 * i, 2);
        mismatches += code != c.encode_value(x[i]) ? 1u : 0u;
      }
      CHECK(mismatches == 0);
    }
  }

  TEST_CASE("quantize: a large fp16 or bf16 output, streamed, holds from_float of the fp32 "
            "decode on a cache line and off one, under seq and par") {
    // 16-bit outputs above cpu::detail::streaming_store_min_bytes, with a short last window
    // (its last elements after the last run of 64); groups of 80, so runs of 64 cross groups,
    // and of 100, decoded a window of groups at a time.
    const std::size_t n = cp::cpu::detail::streaming_store_min_bytes / 2 + 3 * 1024 + 40;
    for (std::uint32_t group : {80u, 100u}) {
      CAPTURE(group);
      const cp::quantize q{.bits = 4, .granularity = cp::scale_granularity::block, .group = group};
      const auto payload = encode_all(q, {}, sample(n, 6));
      std::vector<float> y(n);
      cp::decode(cp::cpu::seq, q, payload, std::span(y));
      commpress::test::check_streamed_16_bit(y, [&](bool seq, auto out) {
        if (seq)
          cp::decode(cp::cpu::seq, q, payload, out);
        else
          cp::decode(cp::cpu::par_t{.threads = 2, .grain = 1000}, q, payload, out);
      });
    }
  }

  TEST_CASE("top_k: long rows keep the k largest magnitudes, lower index first on ties, for "
            "heavy ties, many zeros, skewed halves and NaN/Inf") {
    const std::size_t n = std::size_t{1} << 18; // above sampled_top_k_min_row
    for (int data = 0; data < 4; ++data)
      for (std::uint64_t k :
           {std::uint64_t{1}, std::uint64_t{2621}, std::uint64_t{26215}, std::uint64_t{131072}})
        for (auto policy :
             {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
          CAPTURE(data);
          CAPTURE(k);
          std::vector<float> x = sample(n, 3 + static_cast<std::uint32_t>(data));
          for (std::size_t i = 0; i < n; ++i) {
            if (data == 0)
              x[i] = std::round(x[i]); // few distinct magnitudes: ties at t
            if (data == 1 && i % 3 != 0)
              x[i] = i % 2 ? 0.0f : -0.0f;
            if (data == 2 && i < n / 2)
              x[i] *= 1e-6f;
            if (data == 3 && i % 777 == 5)
              x[i] = i % 2 ? std::numeric_limits<float>::quiet_NaN()
                           : -std::numeric_limits<float>::infinity();
          }
          const cp::top_k c{.count = k};
          const cp::context ctx{.on_nonfinite = policy};
          const auto payload = encode_all(c, ctx, x);
          std::vector<float> got(n);
          cp::decode(cp::cpu::seq, c, payload, std::span<float>(got));
          // Reference: sort (key descending, index ascending) and keep the first k.
          std::vector<std::uint64_t> order(n);
          for (std::size_t i = 0; i < n; ++i) {
            const bool zero =
                policy == cp::nonfinite_policy::zero_and_count && !std::isfinite(x[i]);
            order[i] = (std::uint64_t{0x7fffffffu - (zero ? 0u : key_of(x[i]))} << 32) | i;
          }
          std::sort(order.begin(), order.end());
          std::vector<bool> keep(n, false);
          for (std::size_t j = 0; j < k; ++j)
            keep[order[j] & 0xffffffffu] = true;
          std::size_t mismatches = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const float want =
                keep[i] ? (policy == cp::nonfinite_policy::zero_and_count && !std::isfinite(x[i])
                               ? 0.0f
                               : x[i])
                        : 0.0f;
            mismatches +=
                std::memcmp(&want, &got[i], 4) != 0 && !(std::isnan(want) && std::isnan(got[i]));
          }
          CHECK(mismatches == 0);
        }
  }

  TEST_CASE("sign: one-pass scales equal canonical_chunked_sum over several chunks and the bits "
            "are x < 0") {
    const std::size_t n = 3 * cp::canonical_chunk + 77;
    std::vector<float> x = sample(n, 8);
    x[5] = -0.0f;
    for (auto scale : {cp::sign_scale::mean_abs, cp::sign_scale::rms}) {
      const cp::sign c{.scale = scale};
      const auto payload = encode_all(c, {}, x);
      const unsigned char* body = body_of(payload);
      const double sum =
          cp::canonical_chunked_sum(n, [&](std::uint64_t i) { return c.scale_term(x[i]); });
      const float want = c.scale_from_sum(sum, n);
      float got;
      std::memcpy(&got, body, 4);
      CHECK(std::memcmp(&got, &want, 4) == 0);
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < n; ++i)
        mismatches += cp::detail::unpack_one(body + 4, i, 1) != (x[i] < 0.0f ? 1u : 0u);
      CHECK(mismatches == 0);
    }
  }

  TEST_CASE("canonical sums: the fp64-vector sums of squares equal canonical_sum and "
            "canonical_chunked_sum bit for bit, partial rows and chunks, NaN/Inf as 0") {
    const std::size_t most = 3 * cp::canonical_chunk + 77;
    std::vector<float> x = sample(most, 9);
    // Magnitudes spread over 2^+-20, so that additions in another order round differently; a
    // denormal, and the float maximum last (its square is finite in double, and dominates only
    // the sums that reach it).
    for (std::size_t i = 0; i < most; i += 7)
      x[i] = std::ldexp(x[i], static_cast<int>(i % 41) - 20);
    x[41] = -1e-45f;
    x[most - 1] = 3.4028235e38f;
    x[100] = std::numeric_limits<float>::infinity();
    x[cp::canonical_chunk + 3] = std::numeric_limits<float>::quiet_NaN();
    const auto term = [&](std::size_t first) {
      return [&x, first](std::uint64_t i) {
        const float v = x[first + i];
        return std::isfinite(v) ? static_cast<double>(v) * v : 0.0;
      };
    };
    using square = cp::cpu::detail::finite_square;
    std::size_t mismatches = 0, lengths = 0;
    for (const std::size_t first : {std::size_t{0}, std::size_t{5}})
      for (const std::size_t m :
           {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33},
            std::size_t{95}, std::size_t{1000}, cp::canonical_chunk - 1, cp::canonical_chunk,
            cp::canonical_chunk + 1, most - first}) {
        const double want_one = cp::canonical_sum(m, term(first));
        const double got_one = cp::cpu::detail::canonical_sum_f32<square>(x.data() + first, m);
        const double want = cp::canonical_chunked_sum(m, term(first));
        // The chunked sum as the kit forms a norm: each chunk's fp64-vector sum, in the
        // canonical order of the chunks.
        const double got =
            cp::cpu::detail::sum_of_chunk_sums(m, [&](std::uint64_t a, std::uint64_t len) {
              return cp::cpu::detail::canonical_sum_f32<square>(x.data() + first + a, len);
            });
        mismatches += std::memcmp(&want_one, &got_one, 8) != 0;
        mismatches += std::memcmp(&want, &got, 8) != 0;
        ++lengths;
      }
    CHECK(lengths == 22);
    CHECK(mismatches == 0);
  }

  TEST_CASE("cast: bodies streamed out and hashed from registers equal the per-element "
            "definition, with a valid checksum, at every payload alignment") {
    // Enough output for streaming stores (cpu::detail::streaming_store_min_bytes), whole checksum
    // chunks and a partial last one; NaN and Inf scattered, so both policies count them.
    const std::size_t n = cp::cpu::detail::streaming_store_min_bytes / 2 + 12345;
    std::vector<float> x = sample(n, 7);
    std::size_t planted = 0;
    for (std::size_t i = 17; i < n; i += 1000003, ++planted)
      x[i] = planted % 3 == 0   ? std::numeric_limits<float>::infinity()
             : planted % 3 == 1 ? -std::numeric_limits<float>::infinity()
                                : cp::detail::bits_to_float(0x7fa00001u);
    for (auto to : {cp::dtype::bf16, cp::dtype::f16})
      for (auto policy : {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
        const cp::cast c{.to = to};
        const std::size_t bytes = cp::max_payload_bytes(c, n);
        std::vector<std::byte> storage(bytes + 128);
        std::byte* aligned = storage.data();
        while (reinterpret_cast<std::uintptr_t>(aligned) % 64 != 0)
          ++aligned;
        // The body starts 64 bytes in: aligned for the streaming path, or 16 bytes off it.
        for (std::size_t offset : {0u, 16u}) {
          CAPTURE(offset);
          const std::span<std::byte> payload(aligned + offset, bytes);
          const auto r = cp::encode(cp::cpu::seq, c, {.on_nonfinite = policy},
                                    std::span<const float>(x), payload, {});
          CHECK(r.nonfinite == planted);
          CHECK_NOTHROW(cp::format::validate_envelope(payload));
          const auto* body =
              reinterpret_cast<const unsigned char*>(payload.data()) + cp::format::header_bytes;
          std::size_t mismatches = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const bool zero =
                policy == cp::nonfinite_policy::zero_and_count && !std::isfinite(x[i]);
            std::uint16_t got;
            std::memcpy(&got, body + 2 * i, 2);
            mismatches += got != c.encode_value(zero ? 0.0f : x[i]) ? 1u : 0u;
          }
          CHECK(mismatches == 0);
        }
      }
  }

  TEST_CASE("cast: fp16 and bf16 codes equal to_half / to_bfloat16 for sampled bit patterns, "
            "NaN, Inf, subnormals and overflow included, and decode inverts them") {
    const std::size_t n = std::size_t{1} << 20;
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::uint32_t>(i * 4093u + (i >> 7)); // spreads over all bits
      std::memcpy(&x[i], &u, 4);
    }
    for (auto to : {cp::dtype::f16, cp::dtype::bf16})
      for (auto policy : {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
        const cp::cast c{.to = to};
        const auto payload = encode_all(c, {.on_nonfinite = policy}, x);
        const unsigned char* body = body_of(payload);
        std::vector<float> back(n), acc(n, 1.0f);
        for (std::size_t i = 3; i < n; i += 1001) // NaN accumulators with payloads
          acc[i] = cp::detail::bits_to_float(i % 2 ? 0x7fa00001u : 0xffc00123u);
        const std::vector<float> acc0 = acc;
        cp::decode(cp::cpu::seq, c, payload, std::span<float>(back));
        cp::decode_accumulate(cp::cpu::seq, c, payload, std::span<float>(acc), 2.0f);
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const bool zero = policy == cp::nonfinite_policy::zero_and_count && !std::isfinite(x[i]);
          const std::uint16_t want = c.encode_value(zero ? 0.0f : x[i]);
          std::uint16_t got;
          std::memcpy(&got, body + 2 * i, 2);
          const float v = c.decode_value(want);
          // The accumulation's NaN is the canonical one, bit for bit, as the CUDA kernel writes.
          const float a = cp::detail::add_rn(acc0[i], cp::detail::mul_rn(2.0f, v));
          mismatches +=
              got != want || std::memcmp(&back[i], &v, 4) != 0 || std::memcmp(&acc[i], &a, 4) != 0;
        }
        CHECK(mismatches == 0);
      }
  }

  TEST_CASE("fp16 lanes: the integer rounding and the 16-bit output stores equal to_half and "
            "to_bfloat16 for every high half and the rounding boundaries of the low one, and "
            "every fp16 code decodes to half_bits_to_float_bits") {
    // Low halves at and around a normal half's tie (bit 12 of the 13 dropped), with either
    // parity of the kept bit 13; a subnormal half's ties lie in the high half, all of which is
    // taken.
    constexpr std::uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff,
                                      0x2000, 0x2fff, 0x3000, 0x3001, 0x7fff, 0x8000,
                                      0x8001, 0xefff, 0xf000, 0xffff};
    constexpr std::size_t per_high = std::size(lows);
    std::size_t lane_mismatches = 0;
    std::size_t half_mismatches = 0;
    std::size_t bf16_mismatches = 0;
    alignas(64) float v[64];
    for (std::uint32_t high = 0; high < 0x10000; high += 64 / per_high) {
      for (std::size_t j = 0; j < 64; ++j)
        v[j] = cp::detail::bits_to_float((high + static_cast<std::uint32_t>(j / per_high)) << 16 |
                                         lows[j % per_high]);
      for (std::size_t q = 0; q < 64; q += cp::cpu::simd::lanes) {
        alignas(64) std::uint16_t lane[cp::cpu::simd::lanes];
        cp::cpu::simd::store(lane, cp::cpu::detail::half_bits_rounded(cp::cpu::simd::load(v + q)));
        for (std::size_t j = 0; j < cp::cpu::simd::lanes; ++j)
          lane_mismatches += !std::isnan(v[q + j]) && lane[j] != cp::to_half(v[q + j]).bits;
      }
      cp::half h[64];
      cp::bfloat16 b[64];
      cp::cpu::detail::store_elements_64(h, v);
      cp::cpu::detail::store_elements_64(b, v);
      for (std::size_t j = 0; j < 64; ++j) {
        half_mismatches += h[j].bits != cp::to_half(v[j]).bits;
        bf16_mismatches += b[j].bits != cp::to_bfloat16(v[j]).bits;
      }
    }
    CHECK(lane_mismatches == 0);
    CHECK(half_mismatches == 0);
    CHECK(bf16_mismatches == 0);

    // And back: every fp16 code's value, NaN payloads kept, bit for bit.
    std::size_t value_mismatches = 0;
    for (std::uint32_t first = 0; first < 0x10000; first += cp::cpu::simd::lanes) {
      alignas(64) std::uint16_t codes[cp::cpu::simd::lanes];
      for (std::size_t j = 0; j < cp::cpu::simd::lanes; ++j)
        codes[j] = static_cast<std::uint16_t>(first + j);
      alignas(64) float values[cp::cpu::simd::lanes];
      cp::cpu::simd::store(values,
                           cp::cpu::detail::half_values(cp::cpu::simd::load_u16(codes), codes));
      for (std::size_t j = 0; j < cp::cpu::simd::lanes; ++j)
        value_mismatches +=
            cp::detail::float_to_bits(values[j]) != cp::detail::half_bits_to_float_bits(codes[j]);
    }
    CHECK(value_mismatches == 0);
  }
}
