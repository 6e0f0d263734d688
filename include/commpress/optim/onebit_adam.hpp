// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// 1-bit Adam (Tang et al., ICML 2021; DeepSpeed `OnebitAdam`), docs/methods.md section 8:
/// Adam with an uncompressed gradient exchange for `freeze_step` warm-up steps, then a frozen
/// variance and a compressed, error-compensated exchange of the momentum.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/comm/communicator.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/optim/adam.hpp"
#include "commpress/optim/data_parallel.hpp"
#include "commpress/optim/optimizer.hpp"

namespace commpress {

/// @brief The hyperparameters of 1-bit Adam (DeepSpeed's defaults) and its per-element math.
///
/// Warm-up (the first `freeze_step` steps): the mean gradient is exchanged losslessly and
/// `adamw` (with `bias_correction`) updates m, v and the parameters.
/// Compression stage: v is frozen; with the local gradient g,
/// `m = beta1*m + (1-beta1)*g`, then m is replaced by the average of the ranks' compressed
/// momenta, then `x = x - lr * (m / (sqrt(max(v, variance_floor)) + eps) + wd*x)` (no bias
/// correction, as DeepSpeed).
struct onebit_adam_config {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  std::uint64_t freeze_step = 100000; ///< warm-up steps (DeepSpeed: 15-25% of the run)
  /// Bias correction during warm-up. DeepSpeed's OnebitAdam never corrects, so the update
  /// does not jump when the compression stage starts; true gives PyTorch's AdamW warm-up.
  bool bias_correction = false;
  /// Freeze the elements whose variance is exactly 0 when the compression stage starts (they
  /// never saw a non-zero gradient: dead inputs, unused embeddings). A 1-bit code cannot say
  /// 0, so without the mask such an element moves by +-scale / eps every step and the run
  /// diverges; this is DeepSpeed's `exp_avg_mask` (docs/methods.md 8), derived from v.
  bool mask_zero_variance = true;
  /// The smallest variance the compression stage divides by. A 1-bit code gives every element
  /// of a tensor the same magnitude (the tensor's scale), so an element whose frozen v is tiny
  /// but not 0 (a pixel that is almost always 0) moves by up to lr * scale / (sqrt(v) + eps) a
  /// step: with eps = 1e-8 and v near 1e-12 that is thousands of times lr. The floor bounds
  /// every step by lr * scale / (sqrt(variance_floor) + eps). 0 (DeepSpeed's behaviour) turns
  /// it off; docs/optim.md says how to choose it.
  float variance_floor = 0.0f;

  /// @brief The optimizer that runs the warm-up steps.
  [[nodiscard]] constexpr adamw warmup_optimizer() const noexcept {
    return {.lr = lr,
            .beta1 = beta1,
            .beta2 = beta2,
            .eps = eps,
            .weight_decay = weight_decay,
            .bias_correction = bias_correction};
  }

  [[nodiscard]] constexpr status can_implement(std::uint64_t n) const noexcept {
    if (!(variance_floor >= 0.0f && variance_floor < std::numeric_limits<float>::infinity()))
      return {errc::invalid_argument, "onebit_adam: variance_floor must be finite and >= 0"};
    return warmup_optimizer().can_implement(n);
  }

  /// @brief Compression stage, step 1: the local momentum `beta1*m + (1-beta1)*g`.
  COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float local_momentum(float m, float g) const {
    return detail::add_rn(detail::mul_rn(beta1, m), detail::mul_rn(1.0f - beta1, g));
  }

  /// @brief Compression stage, step 3: `x - lr * (m / (sqrt(max(v, variance_floor)) + eps) +
  /// wd*x)` with frozen v (the decay term is skipped when wd == 0, as DeepSpeed's
  /// `if weight_decay > 0`; the momentum term is skipped where v == 0 under
  /// `mask_zero_variance`).
  COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE float frozen_update(float x, float m, float v) const {
    using namespace detail;
    const float floored = v < variance_floor ? variance_floor : v;
    float u = (mask_zero_variance && v == 0.0f) ? 0.0f : div_rn(m, add_rn(sqrt_rn(floored), eps));
    if (weight_decay != 0.0f)
      u = add_rn(u, mul_rn(weight_decay, x));
    return sub_rn(x, mul_rn(lr, u));
  }

  friend constexpr bool operator==(const onebit_adam_config&, const onebit_adam_config&) = default;
};

/// @brief 1-bit Adam over a caller-supplied communicator.
///
/// Each step (docs/optim.md):
/// - warm-up (`state.step < freeze_step`): all-gather of the local gradients as lossless
///   `identity` payloads, rank-ordered mean (as `data_parallel`), then one `adamw` step;
/// - compression stage: local momentum update, `encode(pipe, worker_error, ctx, m)`, all-gather
///   of the payloads, `m = sum_r (1/N) * deQ(payload_r)` in rank order, frozen-v update.
/// The worker error is the pipeline's error-feedback state (use `pipeline<ef, sign{rms}>` for
/// DeepSpeed's compressor). Unlike DeepSpeed there is no server-side error and no all-to-all:
/// the exchange is an all-gather of compressed payloads (docs/methods.md 9.1 instead of 9.3), so
/// the wire per rank grows with N but the averaged momentum is exactly identical on all ranks.
/// @tparam Comm a host `communicator`
/// @tparam Pipeline a `data_parallel_pipeline`, usually `pipeline<ef, sign>`
template <communicator Comm, data_parallel_pipeline Pipeline>
requires(!uses_device_buffers_v<Comm>) class onebit_adam {
public:
  using feedback_state = pipeline_state_t<Pipeline>;

  /// @brief Sizes the exchange buffers for n parameters (the larger of the lossless warm-up
  /// payload and the compressed payload).
  onebit_adam(Comm& comm, const Pipeline& pipe, const onebit_adam_config& cfg, std::uint64_t n)
      : comm_(&comm), pipe_(pipe), cfg_(cfg), n_(n),
        warmup_bytes_(static_cast<std::size_t>(max_payload_bytes(identity{}, n))),
        compressed_bytes_(static_cast<std::size_t>(pipe.max_payload_bytes(n))),
        mine_(std::max(warmup_bytes_, compressed_bytes_)),
        all_(mine_.size() * static_cast<std::size_t>(comm.size())),
        mean_(static_cast<std::size_t>(n)),
        workspace_(static_cast<std::size_t>(pipe.workspace_bytes(n))) {
    detail::throw_if(pipe.can_implement(n), "onebit_adam");
    detail::throw_if(cfg.can_implement(n), "onebit_adam");
  }

  /// @brief Zeroed moments (m, v) and step count.
  [[nodiscard]] adam_state make_state() const { return cfg_.warmup_optimizer().make_state(n_); }
  /// @brief A zeroed worker error (the pipeline's feedback state).
  [[nodiscard]] feedback_state make_feedback_state() const { return pipe_.make_state(n_); }

  /// @brief True once `st` has passed the warm-up: v is frozen and the momentum is compressed.
  [[nodiscard]] bool compressing(const adam_state& st) const noexcept {
    return st.step >= cfg_.freeze_step;
  }

  /// @brief One step: exchanges (lossless or compressed, by `st.step`) and updates `params`.
  /// @param ctx this rank's encode context for the compressed stage
  /// @returns the bytes this rank contributed and its count of non-finite local inputs
  data_parallel_result step(const cpu::seq_t& policy, const context& ctx, adam_state& st,
                            feedback_state& worker_error, std::span<float> params,
                            std::span<const float> grads) {
    detail::check_step_sizes("onebit_adam", n_, params.size(), grads.size());
    detail::check_step_sizes("onebit_adam", st.n, params.size(), grads.size());
    return compressing(st) ? compressed_step(policy, ctx, st, worker_error, params, grads)
                           : warmup_step(policy, ctx, st, params, grads);
  }

  /// @brief The gradient average (warm-up) or momentum average (compression stage) of the
  /// last step.
  [[nodiscard]] std::span<const float> last_average() const noexcept { return mean_; }

private:
  data_parallel_result warmup_step(const cpu::seq_t& policy, const context& ctx, adam_state& st,
                                   std::span<float> params, std::span<const float> grads) {
    const std::span<std::byte> mine = std::span(mine_).first(warmup_bytes_);
    const auto sent = encode(policy, identity{}, ctx, grads, mine);
    detail::gather_and_average(
        *comm_, std::span<const std::byte>(mine),
        std::span(all_).first(warmup_bytes_ * static_cast<std::size_t>(comm_->size())),
        std::span(mean_),
        [&](std::span<const std::byte> payload, std::span<float> acc, float weight) {
          decode_accumulate(policy, identity{}, payload, acc, weight);
        });
    cfg_.warmup_optimizer().step(policy, st, params, std::span<const float>(mean_));
    return {sent.bytes, sent.nonfinite};
  }

  data_parallel_result compressed_step(const cpu::seq_t& policy, const context& ctx, adam_state& st,
                                       feedback_state& worker_error, std::span<float> params,
                                       std::span<const float> grads) {
    COMMPRESS_EXPECTS(st.exp_avg.size() == n_ && st.exp_avg_sq.size() == n_, errc::size_mismatch,
                      "onebit_adam", "the moments do not hold n elements");
    for (std::size_t i = 0; i < mean_.size(); ++i)
      mean_[i] = cfg_.local_momentum(st.exp_avg[i], grads[i]);
    const std::span<std::byte> mine = std::span(mine_).first(compressed_bytes_);
    const auto sent = encode(policy, pipe_, worker_error, ctx, std::span<const float>(mean_), mine,
                             std::span(workspace_));
    // The average goes straight into m: every rank leaves with the same momentum.
    detail::gather_and_average(
        *comm_, std::span<const std::byte>(mine),
        std::span(all_).first(compressed_bytes_ * static_cast<std::size_t>(comm_->size())),
        std::span(st.exp_avg),
        [&](std::span<const std::byte> payload, std::span<float> acc, float weight) {
          decode_accumulate(policy, pipe_, payload, acc, weight);
        });
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i] = cfg_.frozen_update(params[i], st.exp_avg[i], st.exp_avg_sq[i]);
    std::copy(st.exp_avg.begin(), st.exp_avg.end(), mean_.begin());
    ++st.step;
    return {sent.bytes, sent.nonfinite};
  }

  Comm* comm_;
  Pipeline pipe_;
  onebit_adam_config cfg_;
  std::uint64_t n_;
  std::size_t warmup_bytes_;
  std::size_t compressed_bytes_;
  std::vector<std::byte> mine_;
  std::vector<std::byte> all_;
  std::vector<float> mean_;
  std::vector<std::byte> workspace_;
};

} // namespace commpress
