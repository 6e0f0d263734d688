// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The CPU implementation of rotated<C> (compress/rotated.hpp) under cpu::seq and cpu::par, for
/// every inner codec whose body can be taken back window by window (decode_values: quantize,
/// sign and the block-scaled codecs of the kit).
///
/// Encode rotates each window into the workspace and hands the rotated tensor to the inner
/// codec. Decode takes the inner codec's values of one window at a time onto the stack and
/// rotates them back, so decode and decode_accumulate need no workspace. Roundtrip rotates in
/// place, runs the inner codec's roundtrip and rotates back: the same values as decode, window
/// by window, so the same bits. cpu::par shares whole windows among its threads; each window's
/// arithmetic is seq's, so the bytes are seq's.
///
/// Non-finite inputs: under zero_and_count a NaN or Inf counts as 0 before the rotation; under
/// propagate it makes its whole window NaN, which the inner codec sends as such. The count
/// returned is the input's NaN/Inf elements. A finite window whose rotated values pass the
/// largest float is saturated there (core/hadamard.hpp), so it stays finite.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/detail/parallel.hpp"
#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/scaled.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/compress/rotated.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/hadamard.hpp"
#include "commpress/core/math.hpp"

namespace commpress::cpu::detail {

/// Codecs whose body a transform adapter can take back window by window: decode_values(c, n,
/// body, first, last, dst) writes the values of elements [first, last) at dst[0, last - first)
/// for any first that is a multiple of 8.
template <class C>
concept window_decodable = requires(const C& c, const unsigned char* body, float* dst) {
  decode_values(c, std::uint64_t{}, body, std::uint64_t{}, std::uint64_t{}, dst);
};

/// The codecs and host policies rotated<C> runs on.
template <class C, class Policy>
concept rotatable = window_decodable<C> &&
    (std::same_as<Policy, seq_t> || std::same_as<Policy, par_t>);

namespace rotation {

/// Calls f(first, last) for every window of b elements in [0, n) (the last one possibly
/// shorter), on the policy's threads, and returns the sum of its results.
template <class Policy, class F>
std::size_t sum_over_windows(const Policy& p, std::uint64_t n, std::uint64_t b, F&& f) {
  const auto windows = [&](std::uint64_t first, std::uint64_t last) {
    std::size_t total = 0;
    for (std::uint64_t w = first; w < last; w += b)
      total += f(w, std::min(last, w + b));
    return total;
  };
  if constexpr (std::same_as<Policy, par_t>) {
    if (splits(p, n)) // ranges of whole windows
      return parallel_sum(p, n, commpress::detail::ceil_div(range_elements(p), b) * b, windows);
  }
  return windows(0, n);
}

/// Rotates in[first, last), one window, into y[first, last): screens NaN/Inf by `policy` and
/// returns their count. hadamard_forward's operations in fewer passes over the window: D's
/// signs as sign bits flipped while the window is read (a sign flip is exact), and each piece's
/// 1/sqrt(m) applied while it is rounded back to float.
template <element T>
std::size_t forward_window(const T* in, float* y, std::uint64_t first, std::uint64_t last,
                           nonfinite_policy policy, rng_key key, std::uint64_t step) {
  double buf[std::uint64_t{1} << hadamard_max_log2];
  std::uint32_t sign[std::uint64_t{1} << hadamard_max_log2];
  const std::uint64_t len = last - first;
  commpress::detail::rotation_sign_masks(sign, len, key, step, first);
  const bool zero_nonfinite = policy == nonfinite_policy::zero_and_count;
  std::uint32_t bad = 0; // a window's count, in a lane-sized counter
  for (std::uint64_t j = 0; j < len; ++j) {
    // detail::screen, written on the bits so that the loop vectorizes
    const std::uint32_t u = commpress::detail::float_to_bits(to_float(in[first + j]));
    const bool nonfinite = (u & 0x7fffffffu) > 0x7f7fffffu;
    bad += nonfinite ? 1u : 0u;
    buf[j] = commpress::detail::bits_to_float((zero_nonfinite && nonfinite ? 0u : u) ^ sign[j]);
  }
  commpress::detail::for_each_hadamard_piece(len, [&](std::uint64_t at, std::uint64_t m) {
    commpress::detail::walsh_hadamard(buf + at, m);
    const double scale = commpress::detail::hadamard_scale(m);
    for (std::uint64_t j = at; j < at + m; ++j)
      y[first + j] = commpress::detail::round_to_float(buf[j] * scale);
  });
  return bad;
}

/// The window [first, last) rotated back from its decoded values v[0, last - first):
/// put(i, value) for each element i. hadamard_inverse's operations in fewer passes: each
/// piece's 1/sqrt(m) and D's signs applied while it is rounded back to float.
template <class Put>
void inverse_window(const float* v, std::uint64_t first, std::uint64_t last, rng_key key,
                    std::uint64_t step, Put&& put) {
  double buf[std::uint64_t{1} << hadamard_max_log2];
  std::uint32_t sign[std::uint64_t{1} << hadamard_max_log2];
  const std::uint64_t len = last - first;
  commpress::detail::rotation_sign_masks(sign, len, key, step, first);
  for (std::uint64_t j = 0; j < len; ++j)
    buf[j] = v[j];
  commpress::detail::for_each_hadamard_piece(len, [&](std::uint64_t at, std::uint64_t m) {
    commpress::detail::walsh_hadamard(buf + at, m);
    const double scale = commpress::detail::hadamard_scale(m);
    for (std::uint64_t j = at; j < at + m; ++j)
      put(first + j, commpress::detail::round_to_float(buf[j] * scale, sign[j]));
  });
}

/// Decodes an n-element body of rotated codec c written with (seed, tensor_id, step) window
/// by window: put(i, value) for each element i.
template <class Policy, class C, class Put>
void decode(const Policy& p, const rotated<C>& c, const payload_header& h,
            const unsigned char* body, std::uint64_t n, Put&& put) {
  const rng_key key = rotation_key(h.seed, h.tensor_id);
  sum_over_windows(p, n, c.window(), [&](std::uint64_t first, std::uint64_t last) {
    float v[std::uint64_t{1} << hadamard_max_log2];
    decode_values(c.inner, n, body, first, last, v);
    inverse_window(v, first, last, key, h.step, put);
    return std::size_t{0};
  });
}

/// The rotated tensor's n floats in a workspace of workspace_bytes(), at its first 4-byte
/// aligned byte (a workspace may start anywhere), and the scratch after them.
struct rotated_scratch {
  float* y;
  std::span<std::byte> rest;

  rotated_scratch(std::span<std::byte> ws, std::uint64_t n) {
    const std::size_t skip =
        (alignof(float) - reinterpret_cast<std::uintptr_t>(ws.data()) % alignof(float)) %
        alignof(float);
    y = reinterpret_cast<float*>(ws.data() + skip);
    rest = ws.subspan(skip + 4 * n);
  }
};

} // namespace rotation
} // namespace commpress::cpu::detail

namespace commpress::detail {

template <class C, class Policy>
requires cpu::detail::rotatable<C, Policy>
struct codec_impl<rotated<C>, Policy> {
  using inner = host_impl_t<C, Policy>;
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl): the body is the
  /// inner codec's, hashed as it hashes it.
  static constexpr bool hashes_body = inner::hashes_body;
  static constexpr bool custom_roundtrip = true;

  /// The rotated tensor (4n bytes, and up to 3 to align it) and the inner codec's scratch for
  /// encode, or the inner roundtrip's scratch.
  static std::uint64_t workspace_bytes(const rotated<C>& c, std::uint64_t n) {
    return std::max<std::uint64_t>(alignof(float) - 1 + 4 * n + inner::workspace_bytes(c.inner, n),
                                   commpress::workspace_bytes(Policy{}, c.inner, n));
  }

  static std::size_t ordered_body_from(const rotated<C>& c, std::uint64_t n) requires hashes_body {
    return inner::ordered_body_from(c.inner, n);
  }

  template <element T>
  static std::size_t encode_body(const Policy& p, const rotated<C>& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    return encode_rotated(p, c, ctx, in, body, ws);
  }

  template <element T>
  static std::size_t encode_body(const Policy& p, const rotated<C>& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws,
                                 format::body_checksum& sum) requires hashes_body {
    return encode_rotated(p, c, ctx, in, body, ws, sum);
  }

  template <element T>
  static void decode_body(const Policy& p, const rotated<C>& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    cpu::detail::rotation::decode(p, c, h, body, out.size(),
                                  [&](std::uint64_t i, float v) { out[i] = from_float<T>(v); });
  }

  static void accumulate_body(const Policy& p, const rotated<C>& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    cpu::detail::rotation::decode(p, c, h, body, acc.size(), [&](std::uint64_t i, float v) {
      acc[i] = add_rn(acc[i], mul_rn(weight, v));
    });
  }

  /// Rotates x in place, runs the inner codec's roundtrip, and rotates back window by window.
  static std::size_t roundtrip(const Policy& p, const rotated<C>& c, const context& ctx,
                               std::span<float> x, std::span<std::byte> ws) {
    const std::size_t bad = forward(p, c, ctx, x.data(), x.data(), x.size());
    roundtrip_body(p, c.inner, ctx, x, ws);
    const rng_key key = rotation_key(ctx.seed, ctx.tensor_id);
    cpu::detail::rotation::sum_over_windows(
        p, x.size(), c.window(), [&](std::uint64_t first, std::uint64_t last) {
          cpu::detail::rotation::inverse_window(x.data() + first, first, last, key, ctx.step,
                                                [&](std::uint64_t i, float v) { x[i] = v; });
          return std::size_t{0};
        });
    return bad;
  }

private:
  /// Rotates `in` into the workspace and encodes it with the inner codec (passing it the body
  /// checksum where it hashes the body). Returns the input's NaN/Inf count.
  template <element T, class... Checksum>
  static std::size_t encode_rotated(const Policy& p, const rotated<C>& c, const context& ctx,
                                    std::span<const T> in, unsigned char* body,
                                    std::span<std::byte> ws, Checksum&... sum) {
    const cpu::detail::rotation::rotated_scratch s(ws, in.size());
    const std::size_t bad = forward(p, c, ctx, in.data(), s.y, in.size());
    inner::encode_body(p, c.inner, ctx, std::span<const float>(s.y, in.size()), body, s.rest,
                       sum...);
    return bad;
  }

  /// Every window of in[0, n) rotated into y (in may be y: a window is read whole first).
  template <element T>
  static std::size_t forward(const Policy& p, const rotated<C>& c, const context& ctx, const T* in,
                             float* y, std::uint64_t n) {
    const rng_key key = rotation_key(ctx.seed, ctx.tensor_id);
    return cpu::detail::rotation::sum_over_windows(
        p, n, c.window(), [&](std::uint64_t first, std::uint64_t last) {
          return cpu::detail::rotation::forward_window(in, y, first, last, ctx.on_nonfinite, key,
                                                       ctx.step);
        });
  }
};

} // namespace commpress::detail
