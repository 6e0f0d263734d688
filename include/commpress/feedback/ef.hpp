// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Classic error feedback (EF14 / EF-SGD / Mem-SGD, docs/methods.md 5.1-5.2).

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/feedback/feedback.hpp"
#include "commpress/feedback/fused_quantize.hpp"

namespace commpress {

/// @brief The sender's EF residual e, n fp32 values in gradient units, initially 0.
class ef_state {
public:
  static constexpr std::uint32_t layout_version = 1;

  ef_state() = default;
  explicit ef_state(std::uint64_t n) : e_(n, 0.0f) {}

  [[nodiscard]] std::uint64_t size() const noexcept { return e_.size(); }
  /// The residual e (what was computed but not yet sent).
  [[nodiscard]] std::span<const float> residual() const noexcept { return e_; }
  [[nodiscard]] std::span<float> residual() noexcept { return e_; }

  [[nodiscard]] std::vector<std::byte> save(std::uint32_t tensor_id) const {
    blob_writer w(state_kind::ef_residual, layout_version, tensor_id);
    w.size(e_.size()).put(std::span<const float>(e_));
    return w.finish();
  }
  /// @throws commpress::error for a blob of another kind, version, tensor id or size, or a bad
  ///         checksum; the state is unchanged then.
  void load(std::span<const std::byte> blob, std::uint32_t tensor_id) {
    blob_reader r(blob, state_kind::ef_residual, layout_version, tensor_id);
    r.expect_sizes({e_.size()});
    std::vector<float> e(e_.size());
    r.get(std::span<float>(e));
    r.finish();
    e_.swap(e);
  }
  friend bool operator==(const ef_state&, const ef_state&) = default;

private:
  std::vector<float> e_;
};

/// @brief Error feedback: h = g + e; send C(h); e = h - deQ(C(h)).
///
/// The residual is in gradient units (not learning-rate-scaled; docs/methods.md 5.2), so
/// a learning-rate schedule does not change its meaning. The receiver keeps nothing: it decodes
/// C(h) as plain compression. e is computed from the payload's own decoding, so it is exactly
/// h minus what every receiver reconstructs.
struct ef {
  static constexpr feedback_id id = feedback_id::ef;
  using sender_state = ef_state;
  using receiver_state = no_state;

  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept { return {}; }
  [[nodiscard]] sender_state make_sender_state(std::uint64_t n) const { return ef_state(n); }
  [[nodiscard]] receiver_state make_receiver_state(std::uint64_t) const { return {}; }
  friend constexpr bool operator==(ef, ef) = default;
};

static_assert(feedback<ef>);

namespace detail {

template <> struct feedback_ops<ef> {
  template <class Policy, codec C>
  static std::uint64_t workspace_bytes(const Policy& p, const ef&, const C& c, std::uint64_t n) {
    return scratch_bytes(p, c, n, 1);
  }

  template <class Policy, codec C, element T>
  static step_result encode(const Policy& p, const ef&, const C& c, ef_state& st,
                            const context& ctx, std::span<const T> in, std::span<std::byte> out,
                            std::span<std::byte> ws) {
    const std::uint64_t n = in.size();
    check_state_size(st.size(), n, "ef");
    check_fail_policy(ctx, in, "ef");
    scratch s(ws);
    std::span<float> h = s.floats(n);
    std::span<float> e = st.residual();
    // Symmetric block quantizers: the whole step in one pass over g and e (fused_quantize.hpp).
    const error_update rule{}; // keep 0: e = h - deQ(q) where finite
    if (const auto fused = fused_quantize_step(p, c, ctx, in, e, out, rule))
      return *fused;
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i)
      h[i] = add_rn(screen(to_float(in[i]), ctx.on_nonfinite, bad), e[i]);
    const encode_result r = commpress::encode(p, c, ctx, std::span<const float>(h), out, s.rest());
    // h - deQ(payload), with the receiver's own decoding.
    commpress::decode_accumulate(p, c, std::span<const std::byte>(out.first(r.bytes)), h, -1.0f);
    std::size_t held = 0;
    for (std::size_t i = 0; i < n; ++i)
      held += rule(h[i], e[i]) ? 1u : 0u;
    return {r.bytes, bad, held};
  }

  template <class Policy, codec C, element T>
  static decode_result decode(const Policy& p, const ef&, const C& c, no_state&,
                              std::span<const std::byte> payload, std::span<T> out,
                              std::span<std::byte>) {
    return {commpress::decode(p, c, payload, out), 0};
  }
};

} // namespace detail
} // namespace commpress
