// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay, with
/// PyTorch's `torch.optim.SGD` semantics.

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

/// @brief The state of `sgd` for n parameters: the momentum buffer and the step count.
struct sgd_state {
  static constexpr std::uint32_t layout_version = 1;

  std::uint64_t n = 0;         ///< parameter count the state was made for
  std::uint64_t step = 0;      ///< updates applied so far
  std::vector<float> momentum; ///< n elements; empty when the optimizer has no momentum

  /// @brief A versioned, checksummed blob (core/state_blob.hpp) of the step and the buffer.
  [[nodiscard]] std::vector<std::byte> save(std::uint32_t tensor_id) const {
    blob_writer w(sgd_state_kind, layout_version, tensor_id);
    w.size(n).size(momentum.size()).put(step).put(std::span<const float>(momentum));
    return w.finish();
  }
  /// @brief Restores a blob saved by a state of the same shape.
  /// @throws commpress::error for a blob of another kind, version, tensor id or shape, or a
  ///         bad checksum; the state is unchanged then.
  void load(std::span<const std::byte> blob, std::uint32_t tensor_id) {
    blob_reader r(blob, sgd_state_kind, layout_version, tensor_id);
    r.expect_sizes({n, momentum.size()});
    const auto s = r.get<std::uint64_t>();
    std::vector<float> m(momentum.size());
    r.get(std::span<float>(m));
    r.finish();
    step = s;
    momentum.swap(m);
  }
  friend bool operator==(const sgd_state&, const sgd_state&) = default;
};

/// @brief SGD, element by element as PyTorch's single-tensor path:
/// `d = g + wd*p`; `buf = d` on the first step, else `buf = mom*buf + (1-dampening)*d`;
/// `d = d + mom*buf` (Nesterov) or `d = buf`; `p = p - lr*d`.
///
/// A zero weight decay or momentum skips its term (as PyTorch does), so `g` passes through
/// unchanged, signed zeros included. Non-finite gradients propagate: skipping an overflowed
/// step (loss scaling) is the caller's decision.
struct sgd {
  using state_type = sgd_state;

  float lr = 1e-3f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;

  /// @brief Checks the hyperparameters' domains (PyTorch's constructor checks, plus finiteness).
  [[nodiscard]] constexpr status can_implement(std::uint64_t) const noexcept {
    if (!detail::finite_non_negative(lr))
      return {errc::invalid_argument, "lr must be finite and >= 0"};
    if (!detail::finite_non_negative(momentum))
      return {errc::invalid_argument, "momentum must be finite and >= 0"};
    if (!(dampening >= 0.0f && dampening <= 1.0f))
      return {errc::invalid_argument, "dampening must lie in [0, 1]"};
    if (!detail::finite_non_negative(weight_decay))
      return {errc::invalid_argument, "weight_decay must be finite and >= 0"};
    if (nesterov && (momentum == 0.0f || dampening != 0.0f))
      return {errc::invalid_argument, "nesterov needs momentum > 0 and dampening == 0"};
    return {};
  }

  /// @brief A zeroed state for n parameters (the momentum buffer only when momentum != 0).
  [[nodiscard]] sgd_state make_state(std::uint64_t n) const {
    detail::throw_if(can_implement(n), "sgd");
    sgd_state s;
    s.n = n;
    if (momentum != 0.0f)
      s.momentum.assign(n, 0.0f);
    return s;
  }

  /// @brief One element: returns the new parameter and updates its momentum entry `buf`.
  /// @param first true on the optimizer's first step (the buffer starts as `d`, not as 0)
  COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float update(float p, float g, float& buf,
                                                           bool first) const {
    float d = weight_decay != 0.0f ? detail::add_rn(g, detail::mul_rn(weight_decay, p)) : g;
    if (momentum != 0.0f) {
      buf = first ? d
                  : detail::add_rn(detail::mul_rn(momentum, buf),
                                   detail::mul_rn(1.0f - dampening, d));
      d = nesterov ? detail::add_rn(d, detail::mul_rn(momentum, buf)) : buf;
    }
    return detail::sub_rn(p, detail::mul_rn(lr, d));
  }

  /// @brief Applies one update to `params` in place.
  /// @throws commpress::error invalid hyperparameters, or views whose size is not the state's
  void step(const cpu::seq_t&, sgd_state& s, std::span<float> params,
            std::span<const float> grads) const {
    detail::throw_if(can_implement(s.n), "sgd");
    detail::check_step_sizes("sgd", s.n, params.size(), grads.size());
    const bool has_momentum = momentum != 0.0f;
    COMMPRESS_EXPECTS(!has_momentum || s.momentum.size() == s.n, errc::size_mismatch, "sgd",
                      "the state has no momentum buffer; make it with this configuration");
    const bool first = s.step == 0;
    float unused = 0.0f;
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i] = update(params[i], grads[i], has_momentum ? s.momentum[i] : unused, first);
    ++s.step;
  }

  friend constexpr bool operator==(const sgd&, const sgd&) = default;
};

static_assert(optimizer<sgd>);

} // namespace commpress
