// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// EF21 (Richtárik, Sokolov, Fatkhullin 2021; docs/methods.md 5.3 and 4.4).

#include <cstdint>
#include <span>
#include <vector>

#include "commpress/codec_ops.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/feedback/feedback.hpp"

namespace commpress {

/// @brief An EF21 mirror A: n fp32 values, initially 0. The sender and the receiver each hold
/// one, and they stay bitwise equal as long as both see every payload in order.
class ef21_state {
public:
  static constexpr std::uint32_t layout_version = 1;

  ef21_state() = default;
  explicit ef21_state(std::uint64_t n) : a_(n, 0.0f) {}

  [[nodiscard]] std::uint64_t size() const noexcept { return a_.size(); }
  /// The mirror A: the receiver's reconstruction (the sender's copy of it).
  [[nodiscard]] std::span<const float> mirror() const noexcept { return a_; }
  [[nodiscard]] std::span<float> mirror() noexcept { return a_; }

  [[nodiscard]] std::vector<std::byte> save(std::uint32_t tensor_id) const {
    blob_writer w(state_kind::ef21_mirror, layout_version, tensor_id);
    w.size(a_.size()).put(std::span<const float>(a_));
    return w.finish();
  }
  /// @throws commpress::error for a bad blob; the state is unchanged then.
  void load(std::span<const std::byte> blob, std::uint32_t tensor_id) {
    blob_reader r(blob, state_kind::ef21_mirror, layout_version, tensor_id);
    r.expect_sizes({a_.size()});
    std::vector<float> a(a_.size());
    r.get(std::span<float>(a));
    r.finish();
    a_.swap(a);
  }
  friend bool operator==(const ef21_state&, const ef21_state&) = default;

private:
  std::vector<float> a_;
};

/// @brief EF21: send C(x - A); both ends do A += deQ(C(x - A)); the receiver's output is A.
///
/// The output is the state A, never the increment (docs/methods.md 5.3 names using the increment
/// as a common bug). With TopK_k and a constant x, A == x exactly after ceil(d/k) steps. In data
/// parallelism the receiver mirror is the server's g = mean_i g_i: decode_accumulate each worker's
/// payload into it with weight 1/N.
struct ef21 {
  static constexpr feedback_id id = feedback_id::ef21;
  using sender_state = ef21_state;
  using receiver_state = ef21_state;

  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept { return {}; }
  [[nodiscard]] sender_state make_sender_state(std::uint64_t n) const { return ef21_state(n); }
  [[nodiscard]] receiver_state make_receiver_state(std::uint64_t n) const { return ef21_state(n); }
  friend constexpr bool operator==(ef21, ef21) = default;
};

static_assert(feedback<ef21>);

namespace detail {

template <> struct feedback_ops<ef21> {
  template <class Policy, codec C>
  static std::uint64_t workspace_bytes(const Policy& p, const ef21&, const C& c, std::uint64_t n) {
    return scratch_bytes(p, c, n, 1);
  }

  template <class Policy, codec C, element T>
  static step_result encode(const Policy& p, const ef21&, const C& c, ef21_state& st,
                            const context& ctx, std::span<const T> in, std::span<std::byte> out,
                            std::span<std::byte> ws) {
    const std::uint64_t n = in.size();
    check_state_size(st.size(), n, "ef21");
    check_fail_policy(ctx, in, "ef21");
    scratch s(ws);
    std::span<float> t = s.floats(n);
    std::span<const float> a = st.mirror();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i)
      t[i] = sub_rn(screen(to_float(in[i]), ctx.on_nonfinite, bad), a[i]);
    const encode_result r = commpress::encode(p, c, ctx, std::span<const float>(t), out, s.rest());
    commpress::decode(p, c, std::span<const std::byte>(out.first(r.bytes)), t);
    return {r.bytes, bad, add_finite(st.mirror(), t, 1.0f)};
  }

  /// A += deQ(payload); out = A.
  template <class Policy, codec C, element T>
  static decode_result decode(const Policy& p, const ef21&, const C& c, ef21_state& st,
                              std::span<const std::byte> payload, std::span<T> out,
                              std::span<std::byte> ws) {
    const std::uint64_t n = out.size();
    check_state_size(st.size(), n, "ef21");
    scratch s(ws);
    std::span<float> t = s.floats(n);
    const payload_header h = commpress::decode(p, c, payload, t);
    const std::size_t held = add_finite(st.mirror(), t, 1.0f);
    std::span<const float> a = st.mirror();
    for (std::size_t i = 0; i < n; ++i)
      out[i] = from_float<T>(a[i]);
    return {h, held};
  }

  /// A += weight * deQ(payload) (the data-parallel server mirror).
  template <class Policy, codec C>
  static decode_result accumulate(const Policy& p, const ef21&, const C& c, ef21_state& st,
                                  std::span<const std::byte> payload, float weight,
                                  std::span<std::byte> ws) {
    const std::uint64_t n = st.size();
    scratch s(ws);
    std::span<float> t = s.floats(n);
    const payload_header h = commpress::decode(p, c, payload, t);
    return {h, add_finite(st.mirror(), t, weight)};
  }
};

} // namespace detail
} // namespace commpress
