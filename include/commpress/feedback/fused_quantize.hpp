// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// One feedback step fused with a CPU block quantizer: h = screen(g) + e, the payload of Q(h), and
/// the state update from the fresh error h - deQ(Q(h)), block by block in one pass over g and e
/// (about 12.5 bytes per element at 4 bits instead of ~33 for the sequence of passes). Serves error
/// feedback, and LoCo with fp32 or block-quantized integer state; the bytes and the state are those
/// of their unfused sequences.

#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>

#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/feedback/feedback.hpp"
#include "commpress/feedback/storage.hpp"
#include "commpress/format/body_checksum.hpp"

namespace commpress::detail {

/// The error state of the fused step kept in storage S (LoCo's 8-bit error): each block is
/// loaded into `buffer` and stored back once updated. The quantizer's blocks cover whole
/// storage blocks, so this gives the values of the unfused sequence, which loads the whole
/// row, updates it and stores it back.
template <class S> struct error_in_storage {
  stored_rows<S>& rows;
  float* buffer; ///< quantize_groups::fused_max_block floats

  float* load(std::size_t begin, std::size_t m) const {
    rows.load_range(0, begin, begin + m, buffer);
    return buffer;
  }
  void store(std::size_t begin, std::size_t m) const {
    rows.store_range(0, begin, begin + m, buffer);
  }
  cpu::detail::prefetch_stream stream(std::size_t) const { return {}; }
};

/// The fused step when it serves (cpu::seq, fp32 input, a symmetric block quantizer of at most
/// fused_max_block elements, non-finite policy other than `fail`), else std::nullopt and
/// nothing is touched. The error `e` is an fp32 span updated in place, or a one-row
/// stored_rows<store_int<...>> whose blocks the quantizer's blocks cover whole. `rule` updates
/// e from the fresh error (see encode_ef).
template <class Policy, codec C, element T, class Error>
std::optional<step_result> fused_quantize_step(const Policy&, const C& c, const context& ctx,
                                               std::span<const T> in, Error& e,
                                               std::span<std::byte> out, error_update rule) {
  if constexpr (std::is_same_v<C, quantize> && std::is_same_v<T, float> &&
                std::is_same_v<Policy, cpu::seq_t>) {
    namespace groups = cpu::detail::quantize_groups;
    using impl = codec_impl<quantize, cpu::seq_t>;
    if (ctx.on_nonfinite == nonfinite_policy::fail || !groups::can_fuse_feedback(c))
      return std::nullopt;
    const std::uint64_t n = in.size();
    if constexpr (!std::is_same_v<Error, std::span<float>>) {
      using storage = typename Error::storage_type;
      if (c.group % storage::block != 0)
        return std::nullopt;
    }
    check_can_implement(c, n);
    const std::uint64_t body = c.body_bytes(n);
    check_payload_room(out, body);
    format::write_header(format::header_of(c, ctx, dtype::f32, n), out.data());
    format::body_checksum sum(out.data() + format::header_bytes, body,
                              impl::ordered_body_from(c, n));
    std::size_t held = 0;
    auto* body_ptr = reinterpret_cast<unsigned char*>(out.data() + format::header_bytes);
    std::size_t bad = 0;
    if constexpr (std::is_same_v<Error, std::span<float>>) {
      groups::error_in_place err{e.data(), n};
      bad = groups::encode_error(c, ctx, in.data(), err, n, body_ptr, held, sum, rule);
    } else {
      alignas(64) float buffer[groups::fused_max_block];
      error_in_storage<typename Error::storage_type> err{e, buffer};
      bad = groups::encode_error(c, ctx, in.data(), err, n, body_ptr, held, sum, rule);
    }
    format::store_checksum(out, sum.finish(out.data()));
    return step_result{static_cast<std::size_t>(format::header_bytes + body), bad, held};
  } else {
    return std::nullopt;
  }
}

} // namespace commpress::detail
