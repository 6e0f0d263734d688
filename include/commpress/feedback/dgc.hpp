// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Deep Gradient Compression (Lin, Han, Mao, Wang, Dally, ICLR 2018, arXiv 1712.01887) as an
/// error-feedback policy: momentum correction, momentum factor masking and local gradient
/// clipping on the sender (the paper's sections 3.2 and 3.3), and the warm-up schedule of the
/// density (docs/methods.md section 17).

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "commpress/codec_ops.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/feedback/feedback.hpp"

namespace commpress {

/// @brief The sender's DGC state: the corrected momentum u and the accumulated velocity v, n fp32
/// values each in gradient units, initially 0.
class dgc_state {
public:
  static constexpr std::uint32_t layout_version = 1;

  dgc_state() = default;
  explicit dgc_state(std::uint64_t n) : u_(n, 0.0f), v_(n, 0.0f) {}

  [[nodiscard]] std::uint64_t size() const noexcept { return u_.size(); }
  /// The local momentum u (the paper's u_{k,t}).
  [[nodiscard]] std::span<const float> momentum() const noexcept { return u_; }
  [[nodiscard]] std::span<float> momentum() noexcept { return u_; }
  /// The local accumulation v (the paper's v_{k,t}): what was computed but not yet sent.
  [[nodiscard]] std::span<const float> velocity() const noexcept { return v_; }
  [[nodiscard]] std::span<float> velocity() noexcept { return v_; }

  [[nodiscard]] std::vector<std::byte> save(std::uint32_t tensor_id) const {
    blob_writer w(state_kind::dgc_momentum, layout_version, tensor_id);
    w.size(u_.size()).put(std::span<const float>(u_)).put(std::span<const float>(v_));
    return w.finish();
  }
  /// @throws commpress::error for a blob of another kind, version, tensor id or size, or a bad
  ///         checksum; the state is unchanged then.
  void load(std::span<const std::byte> blob, std::uint32_t tensor_id) {
    blob_reader r(blob, state_kind::dgc_momentum, layout_version, tensor_id);
    r.expect_sizes({u_.size()});
    std::vector<float> u(u_.size()), v(v_.size());
    r.get(std::span<float>(u));
    r.get(std::span<float>(v));
    r.finish();
    u_.swap(u);
    v_.swap(v);
  }
  friend bool operator==(const dgc_state&, const dgc_state&) = default;

private:
  std::vector<float> u_;
  std::vector<float> v_;
};

/// @brief DGC's sender step for any codec C (the paper's momentum correction, section 3.2, eq. 7):
///
///     g'  = g * min(1, clip_norm / ||g||_2)      local gradient clipping (0: off)
///     u'  = momentum * u + g'                     u_{k,t} = m u_{k,t-1} + grad_{k,t}
///     h   = u' + v                                v_{k,t} = v_{k,t-1} + u_{k,t}
///     send C(h)
///     v   = h - deQ(C(h))                         the residual stays in v
///     u   = u' where deQ(C(h)) == 0, else 0       momentum factor masking (section 3.3)
///
/// The paper's mask is the set of elements the sparsifier sent, and it zeroes u and v there.
/// For a general codec "sent" means "decodes to non-zero": there u is zeroed, so a stale
/// momentum does not keep pushing a coordinate that was just applied, and v keeps the residual
/// h - deQ(C(h)), which for an fp32 top-k is exactly 0 at the sent elements and h elsewhere,
/// the paper's v * not(Mask). For a quantizer nearly every element decodes non-zero, so the
/// momentum is cleared almost everywhere and DGC approaches error feedback.
///
/// The trainer applies the decoded (summed or averaged) payloads with plain SGD and no
/// optimizer momentum, w = w - lr * sum_k deQ(C(h_k)): the momentum lives here, before the
/// compression (the paper's eq. 7; applying it after the exchange instead is its eq. 5, which
/// loses the momentum's discounting of delayed coordinates). The residuals are in gradient units,
/// like ef's.
///
/// momentum = 0 with clipping off is ef bit for bit. clip_norm is the local threshold the paper
/// derives from the global one by the factor N^{-1/2} for N workers (local gradient clipping,
/// section 3.2); the caller chooses it. The norm is that of the tensor passed to one encode,
/// taken over its finite elements.
struct dgc {
  static constexpr feedback_id id = feedback_id::dgc;
  using sender_state = dgc_state;
  using receiver_state = no_state;

  float momentum = 0.9f;  ///< m, in [0, 1)
  float clip_norm = 0.0f; ///< local clipping threshold on ||g||_2; 0 = off

  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (!(momentum >= 0.0f && momentum < 1.0f))
      return {errc::invalid_argument, "dgc: momentum must lie in [0, 1)"};
    if (!(clip_norm >= 0.0f && clip_norm <= std::numeric_limits<float>::max()))
      return {errc::invalid_argument, "dgc: clip_norm must be finite and >= 0"};
    return {};
  }
  [[nodiscard]] sender_state make_sender_state(std::uint64_t n) const { return dgc_state(n); }
  [[nodiscard]] receiver_state make_receiver_state(std::uint64_t) const { return {}; }
  friend constexpr bool operator==(const dgc&, const dgc&) = default;
};

static_assert(feedback<dgc>);

/// @brief DGC's warm-up training (the paper's section 3.3): the density starts at `initial` and
/// is multiplied by `factor` every epoch until it reaches `final_density`, where it stays.
///
/// The defaults give the schedule of the paper's experiments (section 4.1) for a 0.1% final
/// density: 25%, 6.25%, 1.5625%, 0.390625% (the paper's 0.4%) in the first four epochs, then 0.1%.
/// The trainer sets its sparsifier's share from it each epoch, e.g.
/// `pipe.codec.fraction = w.density(epoch)`.
struct dgc_warmup {
  float initial = 0.25f;        ///< density in epoch 0, in (0, 1]
  float final_density = 0.001f; ///< density after the warm-up, in (0, initial]
  float factor = 0.25f;         ///< per-epoch multiplier, in (0, 1)

  [[nodiscard]] constexpr status can_implement() const noexcept {
    if (!(initial > 0.0f && initial <= 1.0f))
      return {errc::invalid_argument, "dgc_warmup: initial must lie in (0, 1]"};
    if (!(final_density > 0.0f && final_density <= initial))
      return {errc::invalid_argument, "dgc_warmup: final_density must lie in (0, initial]"};
    if (!(factor > 0.0f && factor < 1.0f))
      return {errc::invalid_argument, "dgc_warmup: factor must lie in (0, 1)"};
    return {};
  }
  /// The density for epoch `epoch` (0-based): max(final_density, initial * factor^epoch).
  /// @throws commpress::error for a configuration can_implement refuses
  [[nodiscard]] float density(std::uint64_t epoch) const {
    const status ok = can_implement();
    COMMPRESS_EXPECTS(ok, ok.code, "dgc_warmup", ok.message);
    // Repeated multiplication in double: exact for the power-of-two defaults, and the loop ends
    // at the first epoch past the warm-up, so a large epoch costs nothing.
    double d = initial;
    for (std::uint64_t e = 0; e < epoch && d > final_density; ++e)
      d *= factor;
    return d > final_density ? static_cast<float>(d) : final_density;
  }
  /// The number of warm-up epochs: the first epoch whose density is final_density.
  /// @throws commpress::error for a configuration can_implement refuses
  [[nodiscard]] std::uint64_t epochs() const {
    const status ok = can_implement();
    COMMPRESS_EXPECTS(ok, ok.code, "dgc_warmup", ok.message);
    std::uint64_t e = 0;
    for (double d = initial; d > final_density; d *= factor)
      ++e;
    return e;
  }
  friend constexpr bool operator==(const dgc_warmup&, const dgc_warmup&) = default;
};

namespace detail {

template <> struct feedback_ops<dgc> {
  template <class Policy, codec C>
  static std::uint64_t workspace_bytes(const Policy& p, const dgc&, const C& c, std::uint64_t n) {
    return scratch_bytes(p, c, n, 3);
  }

  template <class Policy, codec C, element T>
  static step_result encode(const Policy& p, const dgc& f, const C& c, dgc_state& st,
                            const context& ctx, std::span<const T> in, std::span<std::byte> out,
                            std::span<std::byte> ws) {
    const std::uint64_t n = in.size();
    check_state_size(st.size(), n, "dgc");
    const status ok = f.can_implement(n);
    COMMPRESS_EXPECTS(ok, ok.code, "dgc", ok.message);
    check_fail_policy(ctx, in, "dgc");
    scratch s(ws);
    std::span<float> un = s.floats(n); // the new momentum u'
    std::span<float> h = s.floats(n);  // v_t, then its residual v_t - deQ(C(v_t))
    std::span<float> sent = s.floats(n);
    std::span<float> u = st.momentum();
    std::span<float> v = st.velocity();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i)
      un[i] = screen(to_float(in[i]), ctx.on_nonfinite, bad);
    if (f.clip_norm > 0.0f)
      clip(un, f.clip_norm);
    for (std::size_t i = 0; i < n; ++i) {
      // m == 0 takes g itself (not 0 * u + g), so even the sign of a zero matches ef.
      if (f.momentum != 0.0f)
        un[i] = add_rn(mul_rn(f.momentum, u[i]), un[i]);
      h[i] = add_rn(un[i], v[i]); // ef's h = g + e, same operand order
    }
    const encode_result r = commpress::encode(p, c, ctx, std::span<const float>(h), out, s.rest());
    const auto payload = std::span<const std::byte>(out.first(r.bytes));
    // What every receiver reconstructs: the mask, and the residual computed as ef computes it.
    commpress::decode(p, c, payload, sent);
    commpress::decode_accumulate(p, c, payload, h, -1.0f);
    // v = residual where it and u' are finite; u and v both keep their values otherwise, so
    // NaN/Inf never enters either.
    const error_update rule{};
    std::size_t held = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!is_finite(un[i]) || rule(h[i], v[i])) {
        ++held;
        continue;
      }
      u[i] = sent[i] != 0.0f ? 0.0f : un[i];
    }
    return {r.bytes, bad, held};
  }

  template <class Policy, codec C, element T>
  static decode_result decode(const Policy& p, const dgc&, const C& c, no_state&,
                              std::span<const std::byte> payload, std::span<T> out,
                              std::span<std::byte>) {
    return {commpress::decode(p, c, payload, out), 0};
  }

private:
  /// g = g * (clip / ||g||_2) when ||g||_2 > clip, the norm summed in double in index order over
  /// the finite elements (a NaN under nonfinite_policy::propagate would otherwise poison every
  /// element's scale).
  static void clip(std::span<float> g, float clip_norm) {
    double ss = 0.0;
    for (float x : g)
      if (is_finite(x))
        ss += static_cast<double>(x) * static_cast<double>(x);
    const double norm = std::sqrt(ss);
    if (!(norm > static_cast<double>(clip_norm)))
      return;
    const auto k = static_cast<float>(static_cast<double>(clip_norm) / norm);
    for (float& x : g)
      x = mul_rn(k, x);
  }
};

} // namespace detail
} // namespace commpress
