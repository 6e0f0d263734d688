// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// The fused error-feedback + quantize step of feedback/ef.hpp against the unfused definition
// written out with the codec entry points: the same payload bytes and the same residual, bit for
// bit, over several steps, with NaN/Inf and overflowing sums in some blocks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "commpress/backend/cpu/detail/quantize_kernels.hpp"
#include "commpress/feedback/ef.hpp"
#include "commpress/feedback/loco.hpp"
#include "commpress/format/bit_packing.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

// The feedback_avx2 tests (tests/CMakeLists.txt) exist to run the AVX2 kernels.
#if defined(COMMPRESS_TEST_EXPECT_AVX2) && !defined(COMMPRESS_SIMD_AVX2)
#error "built for the AVX2 vector layer, but core/cpu_features.hpp did not select it"
#endif

TEST_SUITE("feedback") {
  TEST_CASE("ef: the fused quantize step writes the payload and residual of encode, "
            "decode_accumulate(-1) and the finite-only copy") {
    const std::size_t n = 5 * 1024 + 12;   // a short last block whose tail is not 8 codes
    for (unsigned bits : {2u, 3u, 4u, 8u}) // 3: the portable code loops
      for (auto round : {cp::rounding::nearest, cp::rounding::stochastic})
        // 72: one vector step and a tail of 8 (one by one); 96 and 40: a tail of 32 and of 40
        // (through the vectors, padded)
        for (std::uint32_t group : {72u, 96u, 40u, 128u, 1024u})
          for (auto policy :
               {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
            CAPTURE(bits);
            CAPTURE(group);
            const cp::quantize q{.bits = bits, .group = group, .round = round};
            const cp::pipeline<cp::ef, cp::quantize> pipe{{}, q};
            auto st = pipe.make_state(n);
            std::vector<float> e_ref(n, 0.0f);
            std::vector<std::byte> out(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
            std::vector<std::byte> ref(cp::max_payload_bytes(q, n));
            std::size_t mismatches = 0;
            for (std::uint64_t step = 0; step < 4; ++step) {
              std::vector<float> g(n);
              for (std::size_t i = 0; i < n; ++i)
                g[i] = (cp::uniform_from_bits(cp::random_u32(cp::make_rng_key(9, 1), step, i)) -
                        0.5f) *
                       static_cast<float>(1 + i % 31);
              g[1024 + 3] = std::numeric_limits<float>::quiet_NaN();
              g[3 * 1024 + 9] = -std::numeric_limits<float>::infinity();
              g[4 * 1024 + 1] = 3.0e38f; // h overflows once e holds a residual
              g[4 * 1024 + 2] = 3.0e38f;
              const cp::context ctx{
                  .seed = 2, .step = step, .tensor_id = 7, .on_nonfinite = policy};
              const auto r = cp::encode(cp::cpu::seq, pipe, st, ctx, std::span<const float>(g),
                                        std::span(out), std::span(ws));
              // The unfused definition.
              std::vector<float> h(n);
              std::size_t bad = 0;
              for (std::size_t i = 0; i < n; ++i)
                h[i] = cp::detail::add_rn(cp::detail::screen(g[i], policy, bad), e_ref[i]);
              cp::encode(cp::cpu::seq, q, ctx, std::span<const float>(h), std::span(ref));
              cp::decode_accumulate(cp::cpu::seq, q, ref, std::span<float>(h), -1.0f);
              std::size_t held = 0;
              for (std::size_t i = 0; i < n; ++i) {
                if (std::isfinite(h[i])) {
                  e_ref[i] = h[i];
                } else {
                  ++held;
                }
              }
              CHECK(r.bytes == ref.size());
              CHECK(std::memcmp(out.data(), ref.data(), ref.size()) == 0);
              CHECK(r.nonfinite == bad);
              CHECK(r.held == held);
              const auto e = st.residual();
              for (std::size_t i = 0; i < n; ++i)
                mismatches += std::memcmp(&e[i], &e_ref[i], 4) != 0 ? 1u : 0u;
            }
            CHECK(mismatches == 0);
          }
  }

  TEST_CASE("loco: the fused quantize step (fp32 state) writes the payload and error of the "
            "unfused sequence, resets included") {
    const std::size_t n = 3 * 1024 + 12;
    for (float beta : {0.0f, 0.8f})
      for (auto round : {cp::rounding::nearest, cp::rounding::stochastic})
        for (auto policy :
             {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
          CAPTURE(beta);
          const cp::quantize q{.bits = 4, .group = 1024, .round = round};
          const cp::loco<cp::store_f32> f{.beta = beta, .reset_every = 3};
          const cp::pipeline<cp::loco<cp::store_f32>, cp::quantize> pipe{f, q};
          auto st = pipe.make_state(n);
          std::vector<float> e_ref(n, 0.0f), e(n);
          std::vector<std::byte> out(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
          std::vector<std::byte> ref(cp::max_payload_bytes(q, n));
          std::size_t mismatches = 0;
          for (std::uint64_t step = 0; step < 5; ++step) {
            std::vector<float> g(n);
            for (std::size_t i = 0; i < n; ++i)
              g[i] =
                  (cp::uniform_from_bits(cp::random_u32(cp::make_rng_key(5, 2), step, i)) - 0.5f) *
                  static_cast<float>(1 + i % 29);
            g[7] = std::numeric_limits<float>::quiet_NaN();
            g[2 * 1024 + 5] = 3.0e38f; // overflows h once e holds an error
            g[2 * 1024 + 6] = 3.0e38f;
            const cp::context ctx{.seed = 4, .step = step, .tensor_id = 1, .on_nonfinite = policy};
            const auto r = cp::encode(cp::cpu::seq, pipe, st, ctx, std::span<const float>(g),
                                      std::span(out), std::span(ws));
            // The unfused definition (feedback/loco.hpp).
            std::vector<float> h(n);
            std::size_t bad = 0;
            for (std::size_t i = 0; i < n; ++i)
              h[i] = cp::detail::add_rn(cp::detail::screen(g[i], policy, bad), e_ref[i]);
            cp::encode(cp::cpu::seq, q, ctx, std::span<const float>(h), std::span(ref));
            cp::decode_accumulate(cp::cpu::seq, q, ref, std::span<float>(h), -1.0f);
            std::size_t held = 0;
            const float take = cp::detail::sub_rn(1.0f, beta);
            for (std::size_t i = 0; i < n; ++i) {
              const float v = beta == 0.0f ? h[i]
                                           : cp::detail::add_rn(cp::detail::mul_rn(beta, e_ref[i]),
                                                                cp::detail::mul_rn(take, h[i]));
              if (std::isfinite(h[i]) && std::isfinite(v)) {
                e_ref[i] = v;
              } else {
                ++held;
              }
            }
            if ((step + 1) % 3 == 0)
              std::fill(e_ref.begin(), e_ref.end(), 0.0f);
            CHECK(r.bytes == ref.size());
            CHECK(std::memcmp(out.data(), ref.data(), ref.size()) == 0);
            CHECK(r.nonfinite == bad);
            CHECK(r.held == held);
            st.error(e);
            for (std::size_t i = 0; i < n; ++i)
              mismatches += std::memcmp(&e[i], &e_ref[i], 4) != 0 ? 1u : 0u;
          }
          CHECK(mismatches == 0);
        }
  }
}

namespace {

/// LoCo with error storage S, fused (the pipeline) against the unfused sequence on a separate
/// stored_rows: the same payloads, counts and stored error over several steps and a reset.
template <class S> void check_loco_int_fused(std::uint32_t group) {
  const std::size_t n = 3 * group + 2 * S::block + 6; // a short last block, odd for store_int4
  for (float beta : {0.0f, 0.8f})
    for (auto round : {cp::rounding::nearest, cp::rounding::stochastic})
      for (auto policy : {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
        CAPTURE(beta);
        const cp::quantize q{.bits = 4, .group = group, .round = round};
        const cp::pipeline<cp::loco<S>, cp::quantize> pipe{{.beta = beta, .reset_every = 4}, q};
        auto st = pipe.make_state(n);
        cp::stored_rows<S> ref_rows(1, n);
        std::vector<float> e(n), h(n);
        std::vector<std::byte> out(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
        std::vector<std::byte> ref(cp::max_payload_bytes(q, n));
        const cp::detail::error_update rule{beta, cp::detail::sub_rn(1.0f, beta)};
        for (std::uint64_t step = 0; step < 5; ++step) {
          std::vector<float> g(n);
          for (std::size_t i = 0; i < n; ++i)
            g[i] = (cp::uniform_from_bits(cp::random_u32(cp::make_rng_key(3, 8), step, i)) - 0.5f) *
                   static_cast<float>(1 + i % 23);
          g[group + 1] = std::numeric_limits<float>::quiet_NaN();
          g[2 * group + 4] = 3.0e38f;
          const cp::context ctx{.seed = 6, .step = step, .tensor_id = 2, .on_nonfinite = policy};
          const auto r = cp::encode(cp::cpu::seq, pipe, st, ctx, std::span<const float>(g),
                                    std::span(out), std::span(ws));
          ref_rows.load_row(0, e.data());
          std::size_t bad = 0;
          for (std::size_t i = 0; i < n; ++i)
            h[i] = cp::detail::add_rn(cp::detail::screen(g[i], policy, bad), e[i]);
          cp::encode(cp::cpu::seq, q, ctx, std::span<const float>(h), std::span(ref));
          cp::decode_accumulate(cp::cpu::seq, q, ref, std::span<float>(h), -1.0f);
          std::size_t held = 0;
          for (std::size_t i = 0; i < n; ++i)
            held += rule(h[i], e[i]) ? 1u : 0u;
          ref_rows.store_row(0, e.data());
          if ((step + 1) % 4 == 0)
            ref_rows.zero();
          CHECK(r.bytes == ref.size());
          CHECK(std::memcmp(out.data(), ref.data(), ref.size()) == 0);
          CHECK(r.nonfinite == bad);
          CHECK(r.held == held);
          CHECK(st.storage() == ref_rows);
        }
      }
}

} // namespace

TEST_SUITE("feedback") {
  TEST_CASE("loco: the fused quantize step with integer error storage keeps the payload and "
            "stored error of the unfused sequence") {
    check_loco_int_fused<cp::store_int8>(1024);
    check_loco_int_fused<cp::store_int8>(128); // one storage block per quantizer block
    check_loco_int_fused<cp::store_int4>(256);
  }

  TEST_CASE("ef: the fused kernel keeps e where the fresh error or the rule's value is not "
            "finite, and counts those elements") {
    // encode_error_codes called directly: through the codecs |h - deQ| <= |h| and LoCo's rule is
    // a convex combination, so a hold is rare there. Here a negative scale makes h - deQ
    // overflow for the large h, and the rule 2e + fresh overflows for the large e, in every
    // 64-element vector step and in the tail: three vector steps and a tail of 8 (one by one)
    // or of 40 (through the vectors, padded).
    for (const std::size_t m : {std::size_t{200}, std::size_t{232}}) {
      CAPTURE(m);
      const auto key = cp::make_rng_key(3, 3);
      std::vector<std::uint32_t> words(m);
      for (std::size_t i = 0; i < m; ++i)
        words[i] = cp::random_u32(key, 1, i);
      const auto check = [&]<unsigned B, bool Stochastic>() {
        for (const cp::detail::error_update rule :
             {cp::detail::error_update{0.0f, 1.0f}, cp::detail::error_update{2.0f, 1.0f}})
          for (bool bounded : {true, false}) {
            CAPTURE(B);
            CAPTURE(Stochastic);
            CAPTURE(rule.keep);
            CAPTURE(bounded);
            // bounded promises |h| < 2^126: then only the rule can overflow.
            const float big = bounded ? 1.0f : 3.0e38f;
            std::vector<float> h(m), e(m);
            for (std::size_t i = 0; i < m; ++i) {
              const float u = cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.5f;
              h[i] = i % 5 == 0 ? std::copysign(big, u) : u;
              e[i] = i % 7 == 0 ? std::copysign(3.0e38f, -u) : 0.25f * u;
            }
            const float qmax = static_cast<float>((1u << (B - 1)) - 1);
            const float inv = qmax / big;
            const float scale = -big / qmax;
            std::vector<unsigned char> out(m / 8 * B);
            const std::vector<float> h0 = h;
            std::vector<float> e_ref = e;
            const cp::quantize::coder coder{inv, 0.0f, 1.0f};
            const cp::quantize::record rec{scale, 0.0f};
            const auto encode_error = [&]<bool Replace, bool CheckFresh>() {
              return cp::cpu::detail::encode_error_codes<B, Stochastic, Replace, CheckFresh>(
                  h.data(), m, B, coder, rec, words.data(), out.data(), rule, e.data(), {});
            };
            const bool replace = rule.keep == 0.0f;
            const std::uint32_t held = replace && bounded
                                           ? encode_error.template operator()<true, false>()
                                       : replace ? encode_error.template operator()<true, true>()
                                       : bounded ? encode_error.template operator()<false, false>()
                                                 : encode_error.template operator()<false, true>();
            // The codes: those of the per-element definitions, packed.
            std::vector<std::uint32_t> codes(m);
            for (std::size_t i = 0; i < m; ++i)
              codes[i] =
                  Stochastic
                      ? cp::quantize::encode_stochastic(cp::quant_range::symmetric, B, h0[i], coder,
                                                        cp::uniform_from_bits(words[i]))
                      : cp::quantize::encode_nearest(cp::quant_range::symmetric, B, h0[i], coder);
            std::vector<unsigned char> packed(m / 8 * B);
            for (std::size_t g = 0; g < m / 8; ++g)
              cp::detail::pack_group(codes.data() + 8 * g, 8, B, packed.data() + g * B);
            CHECK(out == packed);
            std::size_t want = 0, mismatches = 0;
            std::size_t holds_per_part[4] = {}; // the three vector steps, then the tail
            for (std::size_t i = 0; i < m; ++i) {
              const int code = static_cast<int>(cp::detail::unpack_one(out.data(), i, B)) -
                               static_cast<int>(qmax);
              const float fresh =
                  cp::detail::sub_rn(h0[i], cp::detail::mul_rn(static_cast<float>(code), scale));
              const bool hold = rule(fresh, e_ref[i]);
              want += hold ? 1u : 0u;
              holds_per_part[i / 64] += hold ? 1u : 0u;
              mismatches += std::memcmp(&e[i], &e_ref[i], 4) != 0 ? 1u : 0u;
            }
            CHECK(held == want);
            CHECK(mismatches == 0);
            if (bounded && rule.keep == 0.0f) {
              CHECK(want == 0);
            } else {
              for (std::size_t holds : holds_per_part)
                CHECK(holds > 0);
            }
          }
      };
      check.template operator()<2, false>();
      check.template operator()<4, false>();
      check.template operator()<8, false>();
      check.template operator()<4, true>();
    }
  }
}
