// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// LoCo: error feedback with a moving average of past compression errors (Xie et al. 2024, as
/// merged into DeepSpeed; docs/methods.md section 7).

#include <cstdint>
#include <span>
#include <vector>

#include "commpress/codec_ops.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/feedback/feedback.hpp"
#include "commpress/feedback/fused_quantize.hpp"
#include "commpress/feedback/storage.hpp"

namespace commpress {

/// @brief The sender's LoCo error e: n values kept in Storage between steps, initially 0.
template <class Storage = store_f32> class loco_state {
public:
  static constexpr std::uint32_t layout_version = 1;

  loco_state() = default;
  explicit loco_state(std::uint64_t n) : e_(1, n) {}

  [[nodiscard]] std::uint64_t size() const noexcept { return e_.row_length(); }
  /// Writes the error, dequantized, into out[0..size()).
  void error(std::span<float> out) const {
    detail::check_state_size(size(), out.size(), "loco");
    e_.load_row(0, out.data());
  }
  /// The stored values (for store_int: the per-block scales, i.e. the storage steps).
  [[nodiscard]] const stored_rows<Storage>& storage() const noexcept { return e_; }
  [[nodiscard]] stored_rows<Storage>& storage() noexcept { return e_; }

  [[nodiscard]] std::vector<std::byte> save(std::uint32_t tensor_id) const {
    blob_writer w(state_kind::loco_error, layout_version, tensor_id);
    e_.describe(w);
    e_.save(w);
    return w.finish();
  }
  /// @throws commpress::error for a bad blob (also one saved with another Storage); the state
  ///         is unchanged then.
  void load(std::span<const std::byte> blob, std::uint32_t tensor_id) {
    blob_reader r(blob, state_kind::loco_error, layout_version, tensor_id);
    e_.expect(r);
    stored_rows<Storage> e = e_;
    e.load(r);
    r.finish();
    e_ = std::move(e);
  }
  friend bool operator==(const loco_state&, const loco_state&) = default;

private:
  stored_rows<Storage> e_;
};

/// @brief Multiplies the LoCo error by `factor` = new_loss_scale / old_loss_scale: the error
/// lives in loss-scaled units (DeepSpeed multiplies the 8-bit scales; docs/methods.md 7.2).
template <class Storage> void rescale(loco_state<Storage>& st, float factor) {
  st.storage().scale_by(factor);
}

/// @brief Clears the LoCo error, as DeepSpeed does on an fp16 overflow step.
template <class Storage> void drop(loco_state<Storage>& st) {
  st.storage().zero();
}

/// @brief LoCo: h = g + e; q = C(h); e = beta * e + (1 - beta) * (h - deQ(q)).
///
/// `beta` is the weight on the OLD error (DeepSpeed's err_beta, default 0.8; docs/methods.md
/// 7.1); beta = 0 is classic EF, bit for bit. The error is zeroed at the end of every step whose
/// `ctx.step + 1` is a multiple of `reset_every` (0: never), so the period is counted in optimizer
/// steps, one encode per tensor per step, not in tensors processed (the DeepSpeed counter pitfall,
/// docs/methods.md 7.2). Storage store_int8 keeps the error in 8 bits as LoCo does; the error is
/// then exact only to half a storage step per step.
template <class Storage = store_f32> struct loco {
  static constexpr feedback_id id = feedback_id::loco;
  using sender_state = loco_state<Storage>;
  using receiver_state = no_state;

  float beta = 0.8f;                ///< weight on the old error, in [0, 1)
  std::uint64_t reset_every = 1024; ///< reset period in optimizer steps; 0 = never

  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (!(beta >= 0.0f && beta < 1.0f))
      return {errc::invalid_argument, "loco: beta must lie in [0, 1)"};
    return {};
  }
  [[nodiscard]] sender_state make_sender_state(std::uint64_t n) const {
    return loco_state<Storage>(n);
  }
  [[nodiscard]] receiver_state make_receiver_state(std::uint64_t) const { return {}; }
  friend constexpr bool operator==(const loco&, const loco&) = default;
};

static_assert(feedback<loco<>>);

namespace detail {

template <class Storage> struct feedback_ops<loco<Storage>> {
  template <class Policy, codec C>
  static std::uint64_t workspace_bytes(const Policy& p, const loco<Storage>&, const C& c,
                                       std::uint64_t n) {
    return scratch_bytes(p, c, n, 2);
  }

  template <class Policy, codec C, element T>
  static step_result encode(const Policy& p, const loco<Storage>& f, const C& c,
                            loco_state<Storage>& st, const context& ctx, std::span<const T> in,
                            std::span<std::byte> out, std::span<std::byte> ws) {
    const std::uint64_t n = in.size();
    check_state_size(st.size(), n, "loco");
    const status ok = f.can_implement(n);
    COMMPRESS_EXPECTS(ok, ok.code, "loco", ok.message);
    check_fail_policy(ctx, in, "loco");
    // beta == 0 takes the EF value itself, so even the sign of a zero matches EF.
    const error_update rule{f.beta, sub_rn(1.0f, f.beta)};
    const auto finish = [&](step_result r) {
      if (f.reset_every != 0 && (ctx.step + 1) % f.reset_every == 0)
        drop(st);
      return r;
    };
    // A symmetric block quantizer: one pass over g and e (fused_quantize.hpp), updating the fp32
    // error in place, or the integer one a block at a time.
    if constexpr (std::is_same_v<Storage, store_f32>) {
      std::span<float> e = st.storage().values();
      if (const auto fused = fused_quantize_step(p, c, ctx, in, e, out, rule))
        return finish(*fused);
    } else if constexpr (is_store_int<Storage>) {
      if (const auto fused = fused_quantize_step(p, c, ctx, in, st.storage(), out, rule))
        return finish(*fused);
    }
    scratch s(ws);
    std::span<float> e = s.floats(n);
    std::span<float> h = s.floats(n);
    st.error(e);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i)
      h[i] = add_rn(screen(to_float(in[i]), ctx.on_nonfinite, bad), e[i]);
    const encode_result r = commpress::encode(p, c, ctx, std::span<const float>(h), out, s.rest());
    commpress::decode_accumulate(p, c, std::span<const std::byte>(out.first(r.bytes)), h, -1.0f);
    // h now holds the fresh compression error h - deQ(q).
    std::size_t held = 0;
    for (std::size_t i = 0; i < n; ++i)
      held += rule(h[i], e[i]) ? 1u : 0u;
    st.storage().store_row(0, e.data());
    return finish({r.bytes, bad, held});
  }

  template <class Policy, codec C, element T>
  static decode_result decode(const Policy& p, const loco<Storage>&, const C& c, no_state&,
                              std::span<const std::byte> payload, std::span<T> out,
                              std::span<std::byte>) {
    return {commpress::decode(p, c, payload, out), 0};
  }
};

} // namespace detail
} // namespace commpress
