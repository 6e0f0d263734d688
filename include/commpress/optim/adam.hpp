// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Adam and AdamW with PyTorch's `torch.optim.Adam` / `torch.optim.AdamW` semantics (bias
/// correction, L2 or decoupled weight decay); no amsgrad.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "commpress/backend/cpu/policy.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/optim/optimizer.hpp"

namespace commpress {

/// @brief The state of `adam`/`adamw` for n parameters: both moments and the step count.
struct adam_state {
  static constexpr std::uint32_t layout_version = 1;

  std::uint64_t n = 0;           ///< parameter count the state was made for
  std::uint64_t step = 0;        ///< updates applied so far (PyTorch's `state["step"]`)
  std::vector<float> exp_avg;    ///< first moment m, n elements
  std::vector<float> exp_avg_sq; ///< second moment v, n elements

  /// @brief A versioned, checksummed blob (core/state_blob.hpp) of the step and both moments.
  [[nodiscard]] std::vector<std::byte> save(std::uint32_t tensor_id) const {
    blob_writer w(adam_state_kind, layout_version, tensor_id);
    w.size(n).put(step).put(std::span<const float>(exp_avg));
    w.put(std::span<const float>(exp_avg_sq));
    return w.finish();
  }
  /// @brief Restores a blob saved by a state of the same size.
  /// @throws commpress::error for a blob of another kind, version, tensor id or size, or a
  ///         bad checksum; the state is unchanged then.
  void load(std::span<const std::byte> blob, std::uint32_t tensor_id) {
    blob_reader r(blob, adam_state_kind, layout_version, tensor_id);
    r.expect_sizes({n});
    const auto s = r.get<std::uint64_t>();
    std::vector<float> m(n), v(n);
    r.get(std::span<float>(m));
    r.get(std::span<float>(v));
    r.finish();
    step = s;
    exp_avg.swap(m);
    exp_avg_sq.swap(v);
  }
  friend bool operator==(const adam_state&, const adam_state&) = default;
};

/// @brief The per-step scalars of Adam, computed once per step in double on the host (as
/// PyTorch computes them in Python) and rounded to float once.
struct adam_scalars {
  float step_size = 0.0f;             ///< lr / (1 - beta1^t), or lr without bias correction
  float bias_correction2_sqrt = 1.0f; ///< sqrt(1 - beta2^t), or 1 without bias correction
  float decay = 1.0f;                 ///< 1 - lr*wd (AdamW), else 1
};

/// @brief Adam (`Decoupled == false`, weight decay added to the gradient) or AdamW
/// (`Decoupled == true`, the parameter shrinks by `1 - lr*wd` before the update).
///
/// Element order, step t >= 1 (PyTorch's single-tensor path):
/// 1. Adam: `g = g + wd*p`; AdamW: `p = p * (1 - lr*wd)` (skipped when wd == 0);
/// 2. `m = beta1*m + (1-beta1)*g`;
/// 3. `v = beta2*v + ((1-beta2)*g)*g`;
/// 4. `denom = sqrt(v) / sqrt(1 - beta2^t) + eps`;
/// 5. `p = p - (lr / (1 - beta1^t)) * (m / denom)`.
/// Every operation is rounded separately (no FMA), so the CPU and CUDA paths agree bitwise.
/// @note PyTorch >= 2.0 writes step 2 as `m.lerp_(g, 1-beta1)`, which can differ from the
/// expression above in the last bit; apex/DeepSpeed's fused Adam use the expression above.
template <bool Decoupled> struct basic_adam {
  using state_type = adam_state;
  static constexpr bool decoupled_weight_decay = Decoupled;

  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = Decoupled ? 1e-2f : 0.0f; ///< PyTorch's defaults
  bool bias_correction = true;                   ///< false: DeepSpeed/apex `bias_correction=False`

  /// @brief Checks the hyperparameters' domains (PyTorch's constructor checks, plus finiteness).
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (!detail::finite_non_negative(lr))
      return {errc::invalid_argument, "lr must be finite and >= 0"};
    if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f))
      return {errc::invalid_argument, "beta1 and beta2 must lie in [0, 1)"};
    if (!detail::finite_non_negative(eps))
      return {errc::invalid_argument, "eps must be finite and >= 0"};
    if (!detail::finite_non_negative(weight_decay))
      return {errc::invalid_argument, "weight_decay must be finite and >= 0"};
    return {};
  }

  /// @brief Zeroed moments for n parameters.
  [[nodiscard]] adam_state make_state(std::uint64_t n) const {
    detail::throw_if(can_implement(n), Decoupled ? "adamw" : "adam");
    adam_state s;
    s.n = n;
    s.exp_avg.assign(n, 0.0f);
    s.exp_avg_sq.assign(n, 0.0f);
    return s;
  }

  /// @brief The scalars of step t (t >= 1, counted from 1 as PyTorch does).
  [[nodiscard]] adam_scalars scalars(std::uint64_t t) const {
    adam_scalars s;
    const double td = static_cast<double>(t);
    s.step_size =
        bias_correction ? static_cast<float>(lr / (1.0 - std::pow(double{beta1}, td))) : lr;
    s.bias_correction2_sqrt =
        bias_correction ? static_cast<float>(std::sqrt(1.0 - std::pow(double{beta2}, td))) : 1.0f;
    s.decay = Decoupled ? static_cast<float>(1.0 - double{lr} * double{weight_decay}) : 1.0f;
    return s;
  }

  /// @brief One element: returns the new parameter and updates its moments `m` and `v`.
  COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float update(float p, float g, float& m, float& v,
                                                           const adam_scalars& s) const {
    using namespace detail;
    if (weight_decay != 0.0f) {
      if constexpr (Decoupled)
        p = mul_rn(p, s.decay);
      else
        g = add_rn(g, mul_rn(weight_decay, p));
    }
    m = add_rn(mul_rn(beta1, m), mul_rn(1.0f - beta1, g));
    v = add_rn(mul_rn(beta2, v), mul_rn(mul_rn(1.0f - beta2, g), g));
    const float denom = add_rn(div_rn(sqrt_rn(v), s.bias_correction2_sqrt), eps);
    return sub_rn(p, mul_rn(s.step_size, div_rn(m, denom)));
  }

  /// @brief Applies one update to `params` in place.
  /// @throws commpress::error invalid hyperparameters, or views whose size is not the state's
  void step(const cpu::seq_t&, adam_state& st, std::span<float> params,
            std::span<const float> grads) const {
    const char* name = Decoupled ? "adamw" : "adam";
    detail::throw_if(can_implement(st.n), name);
    detail::check_step_sizes(name, st.n, params.size(), grads.size());
    COMMPRESS_EXPECTS(st.exp_avg.size() == st.n && st.exp_avg_sq.size() == st.n,
                      errc::size_mismatch, name, "the moments do not hold n elements");
    const adam_scalars s = scalars(st.step + 1);
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i] = update(params[i], grads[i], st.exp_avg[i], st.exp_avg_sq[i], s);
    ++st.step;
  }

  friend constexpr bool operator==(const basic_adam&, const basic_adam&) = default;
};

/// @brief Adam with L2 weight decay added to the gradient (`torch.optim.Adam`).
using adam = basic_adam<false>;
/// @brief AdamW: decoupled weight decay, `p *= 1 - lr*wd` (`torch.optim.AdamW`).
using adamw = basic_adam<true>;

static_assert(optimizer<adam>);
static_assert(optimizer<adamw>);

} // namespace commpress
