// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// One feedback step fused with a CPU block quantizer (issue 7): h = screen(g) + e, the payload
/// of Q(h), and the state update from the fresh error h - deQ(Q(h)), block by block in one pass
/// over g and e (about 12.5 bytes per element at 4 bits instead of ~33 for the sequence of
/// passes). Serves error feedback and LoCo with fp32 state; the bytes and the state are those
/// of their unfused sequences.

#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>

#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/feedback/feedback.hpp"
#include "commpress/format/body_checksum.hpp"

namespace commpress::detail {

/// The fused step when it serves (cpu::seq, fp32 input, a symmetric block quantizer of at most
/// fused_max_block elements, non-finite policy other than `fail`), else std::nullopt and
/// nothing is touched. `rule` updates e from the fresh error (see encode_ef).
template <class Policy, codec C, element T>
std::optional<step_result> fused_quantize_step(const Policy&, const C& c, const context& ctx,
                                               std::span<const T> in, std::span<float> e,
                                               std::span<std::byte> out, error_update rule) {
  if constexpr (std::is_same_v<C, quantize> && std::is_same_v<T, float> &&
                std::is_same_v<Policy, cpu::seq_t>) {
    using impl = codec_impl<quantize, cpu::seq_t>;
    if (ctx.on_nonfinite == nonfinite_policy::fail || !impl::can_fuse_feedback(c))
      return std::nullopt;
    const std::uint64_t n = in.size();
    check_can_implement(c, n);
    const std::uint64_t body = c.body_bytes(n);
    check_payload_room(out, body);
    format::write_header(format::header_of(c, ctx, dtype::f32, n), out.data());
    format::body_checksum sum(out.data() + format::header_bytes, body,
                              impl::ordered_body_from(c, n));
    std::size_t held = 0;
    auto* body_ptr = reinterpret_cast<unsigned char*>(out.data() + format::header_bytes);
    const std::size_t bad =
        impl::encode_ef(c, ctx, in.data(), e.data(), n, body_ptr, held, sum, rule);
    format::store_checksum(out, sum.finish(out.data()));
    return step_result{static_cast<std::size_t>(format::header_bytes + body), bad, held};
  } else {
    return std::nullopt;
  }
}

} // namespace commpress::detail
