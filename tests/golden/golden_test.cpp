// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Golden digests: every payload, decoded tensor and feedback state that a wide grid of
// configurations, sizes, inputs and policies produces, hashed per codec family and compared
// with digests recorded from an earlier build. Any change of a byte the library writes
// changes a digest, so a change of the wire format (or of the numbers a decoder returns)
// cannot pass unnoticed: update the digest together with docs/wire-format.md.
//
// The grid runs under cpu::seq and under cpu::par with a small grain (several ranges on
// several threads): both must give the digests.
//
// History of the digests (each change is a documented rule of docs/wire-format.md):
// - recorded from the build before the CPU kernels moved onto the vector layer; that move
//   changed no digest;
// - quantize and the other codecs changed when finite inputs stopped decoding to infinities
//   (quantize's scale and step lowered at the float maximum and wide asymmetric groups; cast,
//   top-k and random-k values saturating to f16 / bf16) and sign's NaN scale decoded as the
//   canonical NaN for either bit. With inputs free of NaN, of values beyond f16's range and of
//   values near the float maximum, all three digests were equal before and after;
// - every digest was recorded again when the hash moved from FNV-1a over bytes to the
//   word-wise step of `digest`, from a build whose bytes the previous digests had confirmed;
// - the stochastic codecs' digest was recorded when they were added, from a build in which
//   their bytes equalled scaled_test.cpp's body built from the documented layout;
// - the quantized top-k digest was recorded when the value quantizer was added, from a build in
//   which its bodies equalled the index sections followed by the quantize body of the kept
//   values (top_k_quantized_test.cpp) and the Python decoder written from the document read
//   them back;
// - the quantized random-k digest was recorded when its value quantizer was added, from a build
//   in which its bodies equalled the quantize body of the kept values in stratum order
//   (random_k_quantized_test.cpp) and the Python decoder written from the document read them
//   back;
// - qsgd's Elias digest was recorded when the Elias body was added, from a build in which its
//   payloads decoded to the fixed-width body's bits, its lengths equalled the sum of the Elias
//   codes (qsgd_elias_test.cpp) and the Python decoder written from the document read them back
//   (the other digests did not change: the fixed body's params byte 8 is 0);
// - the rotated codecs' digest was recorded after they had shipped, from a build whose rotated
//   windows rotated_test.cpp checked against the definition's transform, bit for bit.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "commpress/commpress.hpp"

namespace cp = commpress;

namespace {

/// A digest of everything fed to it, in order: FNV-1a's step over 64-bit words (the tail
/// byte by byte), each followed by an xor-shift so that high bits reach the low ones. Every step
/// is a bijection of the state, so any single changed byte changes the digest.
struct digest {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void step(std::uint64_t w) {
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 32;
  }
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, b + i, 8);
      step(w);
    }
    for (; i < n; ++i)
      step(b[i]);
  }
  template <class T> void span(std::span<T> s) { bytes(s.data(), s.size_bytes()); }
  void value(std::uint64_t v) { bytes(&v, sizeof v); }
};

/// Deterministic inputs: kind 0 smooth values, 1 heavy-tailed with the special values
/// (NaN, +-Inf, -0, denormals, values near the float maximum), 2 all zero, 3 constant.
std::vector<float> make_input(std::size_t n, int kind, std::uint32_t seed) {
  std::vector<float> x(n);
  const cp::rng_key key = cp::make_rng_key(seed, 17);
  for (std::size_t i = 0; i < n; ++i) {
    const float u = cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f;
    switch (kind) {
    case 0:
      x[i] = u;
      break;
    case 1: {
      const float v = cp::uniform_from_bits(cp::random_u32(key, 1, i));
      x[i] = u / (0.01f + v * v);
      break;
    }
    case 2:
      x[i] = 0.0f;
      break;
    default:
      x[i] = 0.625f;
      break;
    }
  }
  if (kind == 1) {
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              -0.0f,
                              1e-40f,
                              -3e-39f,
                              3.4e38f,
                              -3.3e38f};
    for (std::size_t j = 0; j < 8 && n > 0; ++j)
      x[(j * 977 + 13) % n] = specials[j];
  }
  return x;
}

/// make_input, generated once per (n, kind, seed): the grid asks for the same tensors for every
/// configuration and for both policies.
const std::vector<float>& input(std::size_t n, int kind, std::uint32_t seed) {
  static std::map<std::tuple<std::size_t, int, std::uint32_t>, std::vector<float>> made;
  auto [it, fresh] = made.try_emplace({n, kind, seed});
  if (fresh)
    it->second = make_input(n, kind, seed);
  return it->second;
}

template <class T> std::vector<T> as(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = cp::from_float<T>(x[i]);
  return y;
}

/// Encodes in, hashes the payload (or the refusal), decodes it (into T and, for fp32, by
/// decode_accumulate onto a base) and round-trips, hashing every result.
template <class Policy, class C, class T>
void run_codec(const Policy& p, digest& d, const C& c, const std::vector<float>& xf,
               cp::nonfinite_policy policy, std::uint64_t step) {
  const std::vector<T> x = as<T>(xf);
  const std::size_t n = x.size();
  const cp::context ctx{.seed = 7, .step = step, .tensor_id = 3, .on_nonfinite = policy};
  std::vector<std::byte> payload(cp::max_payload_bytes(c, n));
  std::vector<std::byte> ws(cp::workspace_bytes(p, c, n));
  const cp::encode_result r =
      cp::encode(p, c, ctx, std::span<const T>(x), std::span(payload), std::span(ws));
  d.value(r.bytes);
  d.value(r.nonfinite);
  d.span(std::span<const std::byte>(payload));
  std::vector<T> out(n);
  cp::decode(p, c, std::span<const std::byte>(payload), std::span(out));
  d.span(std::span<const T>(out));
  if constexpr (std::is_same_v<T, float>) {
    std::vector<float> acc = input(n, 0, 99);
    cp::decode_accumulate(p, c, std::span<const std::byte>(payload), std::span(acc), -0.75f);
    d.span(std::span<const float>(acc));
    std::vector<float> y = xf;
    const cp::encode_result rt = cp::roundtrip(p, c, ctx, std::span(y), std::span(ws));
    d.value(rt.nonfinite);
    d.span(std::span<const float>(y));
  }
}

template <class Policy, class C>
void run_all_types(const Policy& p, digest& d, const C& c, const std::vector<float>& x,
                   cp::nonfinite_policy policy, std::uint64_t step, bool narrow_types) {
  run_codec<Policy, C, float>(p, d, c, x, policy, step);
  if (narrow_types) {
    run_codec<Policy, C, cp::half>(p, d, c, x, policy, step);
    run_codec<Policy, C, cp::bfloat16>(p, d, c, x, policy, step);
  }
}

constexpr cp::nonfinite_policy policies[] = {cp::nonfinite_policy::propagate,
                                             cp::nonfinite_policy::zero_and_count};

template <class Policy> std::uint64_t quantize_digest(const Policy& p) {
  digest d;
  for (unsigned bits = 1; bits <= 8; ++bits)
    for (auto range : {cp::quant_range::symmetric, cp::quant_range::asymmetric})
      for (auto round : {cp::rounding::nearest, cp::rounding::stochastic}) {
        if (range == cp::quant_range::symmetric && bits < 2)
          continue;
        struct shape {
          cp::scale_granularity g;
          std::uint32_t group;
        };
        for (const shape s : {shape{cp::scale_granularity::tensor, 0},
                              {cp::scale_granularity::block, 8},
                              {cp::scale_granularity::block, 12},
                              {cp::scale_granularity::block, 100},
                              {cp::scale_granularity::block, 128},
                              {cp::scale_granularity::block, 1024},
                              {cp::scale_granularity::block, 4104},
                              {cp::scale_granularity::column, 4}}) {
          const cp::quantize c{
              .bits = bits, .granularity = s.g, .group = s.group, .range = range, .round = round};
          for (std::size_t n : {0u, 1u, 7u, 8u, 64u, 65u, 1003u, 9000u}) {
            if (!c.can_implement(n))
              continue;
            for (int kind = 0; kind < 4; ++kind)
              for (auto policy : policies)
                run_all_types(p, d, c, input(n, kind, bits), policy, 5, n < 2000 && kind < 2);
          }
        }
      }
  // Large tensors: streaming stores on decode, the per-tensor two-pass encode, long chunks.
  for (unsigned bits : {2u, 4u, 8u}) {
    const cp::quantize block{.bits = bits, .group = 1024};
    const cp::quantize tensor{.bits = bits,
                              .granularity = cp::scale_granularity::tensor,
                              .group = 0,
                              .round = cp::rounding::stochastic};
    const std::vector<float>& x = input((std::size_t{9} << 20) + 40, 0, 4);
    run_codec<Policy, cp::quantize, float>(p, d, block, x, cp::nonfinite_policy::propagate, 1);
    run_codec<Policy, cp::quantize, float>(p, d, tensor, x, cp::nonfinite_policy::propagate, 1);
  }
  return d.h;
}

/// The block-scaled codecs of each digest: the deterministic ones (fp8, MX, NVFP4) and the
/// stochastic ones (TernGrad, natural compression, QSGD). Together they are every block-scaled
/// codec of compress/codec_list.hpp (checked below), so a new one needs a digest recorded here.
using deterministic_scaled =
    cp::codec_list<cp::fp8, cp::mxfp8, cp::mxfp8_e5m2, cp::mxfp4, cp::nvfp4>;
using stochastic_scaled =
    cp::codec_list<cp::terngrad, cp::natural, cp::qsgd8, cp::qsgd4, cp::qsgd2>;

template <class... C> constexpr std::size_t count_scaled(cp::codec_list<C...>) {
  return (std::size_t{0} + ... + (cp::block_scaled_codec<C> ? 1 : 0));
}
static_assert(count_scaled(cp::all_codecs{}) ==
                  deterministic_scaled::size + stochastic_scaled::size,
              "a block-scaled codec of codec_list.hpp has no golden digest");

/// Every example configuration of every codec of List.
template <class List, class Policy> std::uint64_t scaled_codecs_digest(const Policy& p) {
  digest d;
  List::for_each([&](auto t) {
    using C = typename decltype(t)::type;
    for (const C& c : C::examples())
      for (std::size_t n : {0u, 1u, 15u, 16u, 33u, 1003u, 70001u}) {
        if (!c.can_implement(n))
          continue;
        for (int kind = 0; kind < 4; ++kind)
          for (auto policy : policies)
            run_all_types(p, d, c, input(n, kind, 11), policy, 2, n < 2000 && kind < 2);
      }
  });
  return d.h;
}

template <class Policy> std::uint64_t other_codecs_digest(const Policy& p) {
  digest d;
  const auto each = [&](const auto& c, std::initializer_list<std::size_t> sizes) {
    for (std::size_t n : sizes) {
      if (!c.can_implement(n))
        continue;
      for (int kind = 0; kind < 4; ++kind)
        for (auto policy : policies)
          run_all_types(p, d, c, input(n, kind, 3), policy, 2, n < 100000 && kind < 2);
    }
  };
  each(cp::identity{}, {0, 1, 100, 1003});
  for (auto to : {cp::dtype::bf16, cp::dtype::f16})
    each(cp::cast{.to = to}, {0, 1, 15, 16, 17, 1003, (std::size_t{17} << 20) + 5});
  for (auto scale : {cp::sign_scale::mean_abs, cp::sign_scale::rms}) {
    each(cp::sign{.scale = scale}, {0, 1, 31, 33, 1003, 70001});
    each(cp::sign{.granularity = cp::sign_granularity::block, .block = 1024, .scale = scale},
         {1, 1003, 70001});
  }
  for (auto values : {cp::dtype::f32, cp::dtype::bf16})
    for (float fraction : {0.01f, 0.1f, 0.6f}) {
      each(cp::top_k{.fraction = fraction, .values = values}, {0, 1, 100, 1003, 70001, 300007});
      each(cp::top_k{.fraction = fraction, .row_length = 100, .values = values}, {100, 1000});
      each(cp::random_k{.fraction = fraction, .values = values}, {0, 1, 100, 1003, 70001});
      each(cp::random_k{.fraction = fraction, .unbiased = true, .values = values}, {1003});
    }
  return d.h;
}

/// The value quantizers of the sparse digests, in order: 2 and 4 bits, both ranges, both
/// roundings, one scale per tensor and one per 64 kept values.
template <class F> void for_each_value_quantizer(F&& f) {
  for (unsigned bits : {2u, 4u})
    for (auto range : {cp::quant_range::symmetric, cp::quant_range::asymmetric})
      for (auto round : {cp::rounding::nearest, cp::rounding::stochastic})
        for (std::uint32_t group : {0u, 64u})
          f(cp::quantize{.bits = bits,
                         .granularity = group == 0 ? cp::scale_granularity::tensor
                                                   : cp::scale_granularity::block,
                         .group = group,
                         .range = range,
                         .round = round});
}

/// top_k with quantized kept values: per-tensor and chunked selection, each value quantizer.
template <class Policy> std::uint64_t sparse_quantized_digest(const Policy& p) {
  digest d;
  for_each_value_quantizer([&](const cp::quantize& q) {
    for (const cp::top_k& c : {cp::top_k{.fraction = 0.05f, .value_quantizer = q},
                               cp::top_k{.count = 2, .row_length = 64, .value_quantizer = q}})
      for (std::size_t n : {0u, 64u, 1024u, 70016u}) {
        if (!c.can_implement(n))
          continue;
        for (int kind = 0; kind < 4; ++kind)
          for (auto policy : policies)
            run_all_types(p, d, c, input(n, kind, 5), policy, 2, n < 2000 && kind < 2);
      }
  });
  return d.h;
}

/// random_k with quantized kept values: biased and unbiased, at two densities, each value
/// quantizer.
template <class Policy> std::uint64_t random_k_quantized_digest(const Policy& p) {
  digest d;
  for_each_value_quantizer([&](const cp::quantize& q) {
    for (const cp::random_k& c :
         {cp::random_k{.fraction = 0.05f, .value_quantizer = q},
          cp::random_k{.count = 300, .unbiased = true, .value_quantizer = q}})
      for (std::size_t n : {0u, 64u, 1024u, 70016u})
        for (int kind = 0; kind < 4; ++kind)
          for (auto policy : policies)
            run_all_types(p, d, c, input(n, kind, 5), policy, 2, n < 2000 && kind < 2);
  });
  return d.h;
}

/// qsgd's Elias body: s = 1 with one norm per tensor, s = 7 in blocks of 128, s = 127 in blocks
/// of 5 (a block that does not divide most sizes).
template <class Policy> std::uint64_t qsgd_elias_digest(const Policy& p) {
  digest d;
  const auto each = [&](auto c) {
    c.coding = cp::qsgd_coding::elias;
    for (std::size_t n : {0u, 1u, 15u, 16u, 33u, 1003u, 70001u})
      for (int kind = 0; kind < 4; ++kind)
        for (auto policy : policies)
          run_all_types(p, d, c, input(n, kind, 13), policy, 2, n < 2000 && kind < 2);
  };
  each(cp::qsgd2{.levels = 1});
  each(cp::qsgd4{.block = 128, .levels = 7});
  each(cp::qsgd8{.block = 5, .levels = 127});
  return d.h;
}

/// The Hadamard rotation before quantize (block and tensor scales, stochastic rounding), sign and
/// MXFP4, in windows of 8 to 4096: sizes that leave a short last window cut into pieces, and
/// inputs with NaN, infinities and values near the float maximum.
template <class Policy> std::uint64_t rotated_digest(const Policy& p) {
  digest d;
  const auto each = [&](const auto& inner) {
    for (std::uint8_t log2 :
         {std::uint8_t{3}, std::uint8_t{6}, std::uint8_t{8}, std::uint8_t{12}}) {
      const cp::rotated<std::decay_t<decltype(inner)>> c{inner, log2};
      for (std::size_t n : {0u, 1u, 7u, 8u, 15u, 33u, 1003u, 70001u}) {
        if (!c.can_implement(n))
          continue;
        for (int kind = 0; kind < 4; ++kind)
          for (auto policy : policies)
            run_all_types(p, d, c, input(n, kind, 17), policy, 3, n < 2000 && kind < 2);
      }
    }
  };
  each(cp::quantize{.bits = 4, .group = 256});
  each(cp::quantize{.bits = 2,
                    .granularity = cp::scale_granularity::tensor,
                    .group = 0,
                    .round = cp::rounding::stochastic});
  each(cp::sign{});
  each(cp::mxfp4{});
  return d.h;
}

/// Several steps of a feedback pipeline on one tensor: payloads and the sender state.
template <class Pipe> void run_pipeline(digest& d, const Pipe& pipe, std::size_t n) {
  auto state = pipe.make_state(n);
  std::vector<std::byte> out(pipe.max_payload_bytes(n));
  std::vector<std::byte> ws(pipe.workspace_bytes(n) + 64);
  void* raw = ws.data();
  std::size_t space = ws.size();
  auto* aligned = static_cast<std::byte*>(std::align(64, ws.size() - 64, raw, space));
  const std::span<std::byte> workspace(aligned, ws.size() - 64);
  for (std::uint64_t step = 0; step < 4; ++step) {
    const std::vector<float> g = input(n, step % 2 == 0 ? 0 : 1, static_cast<std::uint32_t>(step));
    for (auto policy : policies) {
      const cp::context ctx{.seed = 9, .step = step, .tensor_id = 4, .on_nonfinite = policy};
      const cp::step_result r = cp::encode(cp::cpu::seq, pipe, state, ctx,
                                           std::span<const float>(g), std::span(out), workspace);
      d.value(r.bytes);
      d.value(r.nonfinite);
      d.value(r.held);
      d.span(std::span<const std::byte>(out));
      const std::vector<std::byte> blob = state.save(4);
      d.span(std::span<const std::byte>(blob));
    }
  }
}

std::uint64_t feedback_digest() {
  digest d;
  for (unsigned bits : {2u, 3u, 4u, 8u})
    for (auto round : {cp::rounding::nearest, cp::rounding::stochastic})
      for (std::uint32_t group : {128u, 1024u})
        for (std::size_t n : {1000u, 5000u}) {
          const cp::quantize q{.bits = bits, .group = group, .round = round};
          run_pipeline(d, cp::pipeline<cp::ef, cp::quantize>{{}, q}, n);
          run_pipeline(
              d, cp::pipeline<cp::loco<cp::store_f32>, cp::quantize>{{.reset_every = 3}, q}, n);
          run_pipeline(d, cp::pipeline<cp::loco<cp::store_int8>, cp::quantize>{{.beta = 0.5f}, q},
                       n);
          run_pipeline(d, cp::pipeline<cp::loco<cp::store_int4>, cp::quantize>{{}, q}, n);
        }
  run_pipeline(d, cp::pipeline<cp::ef, cp::top_k>{{}, {.fraction = 0.05f}}, 100000);
  run_pipeline(d, cp::pipeline<cp::ef21, cp::quantize>{{}, {.bits = 4, .group = 64}}, 3000);
  return d.h;
}

void check_digest(const char* name, std::uint64_t got, std::uint64_t want) {
  CAPTURE(name);
  if (got != want)
    std::printf("golden digest %s: 0x%016llxull\n", name, static_cast<unsigned long long>(got));
  CHECK(got == want);
}

// Recorded from the build the digests describe (see this file's comment).
constexpr std::uint64_t golden_quantize = 0x077fa9f3b13223e0ull;
constexpr std::uint64_t golden_other_codecs = 0x2f1cf1eb5a905a14ull;
constexpr std::uint64_t golden_feedback = 0x38fcfac18ed7b30bull;
constexpr std::uint64_t golden_scaled_codecs = 0xe69084f10c4d1398ull;
constexpr std::uint64_t golden_stochastic_codecs = 0x4c1b602a762fbcb4ull;
constexpr std::uint64_t golden_sparse_quantized = 0xac1fcd83bf3c66ccull;
constexpr std::uint64_t golden_random_k_quantized = 0x63e35368a59ed6f3ull;
constexpr std::uint64_t golden_qsgd_elias = 0xffc911debda42619ull;
constexpr std::uint64_t golden_rotated = 0x2c6054b8fe9723a3ull;

} // namespace

TEST_SUITE("reliability") {
  TEST_CASE("golden: quantize writes and reads the recorded bytes under cpu::seq and cpu::par") {
    check_digest("quantize (seq)", quantize_digest(cp::cpu::seq), golden_quantize);
    check_digest("quantize (par)", quantize_digest(cp::cpu::par_t{.threads = 3, .grain = 256}),
                 golden_quantize);
  }
  TEST_CASE("golden: identity, cast, sign, top-k and random-k write and read the recorded bytes") {
    check_digest("other codecs (seq)", other_codecs_digest(cp::cpu::seq), golden_other_codecs);
    check_digest("other codecs (par)",
                 other_codecs_digest(cp::cpu::par_t{.threads = 3, .grain = 256}),
                 golden_other_codecs);
  }
  TEST_CASE("golden: the block-scaled codecs (fp8, MX, NVFP4) write and read the recorded bytes") {
    check_digest("scaled codecs (seq)", scaled_codecs_digest<deterministic_scaled>(cp::cpu::seq),
                 golden_scaled_codecs);
    check_digest(
        "scaled codecs (par)",
        scaled_codecs_digest<deterministic_scaled>(cp::cpu::par_t{.threads = 3, .grain = 256}),
        golden_scaled_codecs);
  }
  TEST_CASE("golden: the stochastic block-scaled codecs (TernGrad, natural, QSGD) write and read "
            "the recorded bytes") {
    check_digest("stochastic codecs (seq)", scaled_codecs_digest<stochastic_scaled>(cp::cpu::seq),
                 golden_stochastic_codecs);
    check_digest(
        "stochastic codecs (par)",
        scaled_codecs_digest<stochastic_scaled>(cp::cpu::par_t{.threads = 3, .grain = 256}),
        golden_stochastic_codecs);
  }
  TEST_CASE("golden: top-k with quantized values writes and reads the recorded bytes") {
    check_digest("sparse quantized (seq)", sparse_quantized_digest(cp::cpu::seq),
                 golden_sparse_quantized);
    check_digest("sparse quantized (par)",
                 sparse_quantized_digest(cp::cpu::par_t{.threads = 3, .grain = 256}),
                 golden_sparse_quantized);
  }
  TEST_CASE("golden: random-k with quantized values writes and reads the recorded bytes") {
    check_digest("random_k quantized (seq)", random_k_quantized_digest(cp::cpu::seq),
                 golden_random_k_quantized);
    check_digest("random_k quantized (par)",
                 random_k_quantized_digest(cp::cpu::par_t{.threads = 3, .grain = 256}),
                 golden_random_k_quantized);
  }
  TEST_CASE("golden: qsgd's Elias body writes and reads the recorded bytes") {
    check_digest("qsgd elias (seq)", qsgd_elias_digest(cp::cpu::seq), golden_qsgd_elias);
    check_digest("qsgd elias (par)", qsgd_elias_digest(cp::cpu::par_t{.threads = 3, .grain = 256}),
                 golden_qsgd_elias);
  }
  TEST_CASE("golden: the rotated codecs write and read the recorded bytes") {
    check_digest("rotated (seq)", rotated_digest(cp::cpu::seq), golden_rotated);
    check_digest("rotated (par)", rotated_digest(cp::cpu::par_t{.threads = 3, .grain = 256}),
                 golden_rotated);
  }
  TEST_CASE("golden: error feedback and LoCo steps write the recorded payloads and states") {
    check_digest("feedback", feedback_digest(), golden_feedback);
  }
}
