// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// The fused error-feedback + quantize step of feedback/ef.hpp (issue 7) against the unfused
// definition written out with the codec entry points: the same payload bytes and the same
// residual, bit for bit, over several steps, with NaN/Inf and overflowing sums in some blocks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

TEST_SUITE("feedback") {
  TEST_CASE("ef: the fused quantize step writes the payload and residual of encode, "
            "decode_accumulate(-1) and the finite-only copy") {
    const std::size_t n = 5 * 1024 + 12; // a short last block whose tail is not 8 codes
    for (unsigned bits : {2u, 4u, 8u})
      for (auto round : {cp::rounding::nearest, cp::rounding::stochastic})
        for (std::uint32_t group : {128u, 1024u})
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
}
