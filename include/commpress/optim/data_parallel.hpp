// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The compressed data-parallel step: compress the local gradient, all-gather the fixed-size
/// payloads through the caller's communicator, decode and average them in rank order, and
/// apply the optimizer to the average (docs/methods.md section 9.1).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "commpress/backend/cpu/policy.hpp"
#include "commpress/comm/communicator.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/error.hpp"
#include "commpress/optim/optimizer.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace commpress {

/// @brief A pipeline whose payloads can be averaged by the data-parallel exchange: the
/// receiver needs no state of its own (feedback none, ef, loco or dgc; not ef21 or aq_sgd).
template <class P>
concept data_parallel_pipeline = requires(const P& p, std::uint64_t n,
                                          std::span<const std::byte> payload,
                                          std::span<float> acc) {
  { p.max_payload_bytes(n) } -> std::convertible_to<std::uint64_t>;
  { p.workspace_bytes(n) } -> std::convertible_to<std::uint64_t>;
  { p.can_implement(n) } -> std::same_as<status>;
  p.make_state(n);
  decode_accumulate(cpu::seq, p, payload, acc, 1.0f);
};

/// @brief The sender-side state type of a pipeline (error-feedback buffers).
template <class P>
using pipeline_state_t = decltype(std::declval<const P&>().make_state(std::uint64_t{0}));

/// @brief What one data-parallel step did on this rank.
struct data_parallel_result {
  std::size_t payload_bytes = 0; ///< bytes this rank contributed to the all-gather
  std::size_t nonfinite = 0;     ///< NaN/Inf elements in this rank's local input
};

namespace detail {

/// Averages the gathered payloads: `out = 0; out += (1/N) * deQ(payload_r)` for r = 0..N-1 in
/// rank order, so every rank computes the same bits from the same gathered bytes.
template <class Comm, class AccumulateOne>
void gather_and_average(Comm& comm, std::span<const std::byte> mine, std::span<std::byte> all,
                        std::span<float> out, AccumulateOne&& accumulate) {
  comm.all_gather(mine, all);
  std::fill(out.begin(), out.end(), 0.0f);
  const int ranks = static_cast<int>(comm.size());
  const float weight = 1.0f / static_cast<float>(ranks);
  for (int r = 0; r < ranks; ++r)
    accumulate(std::span<const std::byte>(
                   all.subspan(static_cast<std::size_t>(r) * mine.size(), mine.size())),
               out, weight);
}

} // namespace detail

/// @brief One compressed data-parallel training step over a caller-supplied communicator.
///
/// Protocol, identical on every rank (docs/optim.md):
/// 1. `encode(pipe, feedback_state, ctx, grads)` into this rank's payload (exactly
///    `max_payload_bytes(n)` bytes, so no size exchange is needed);
/// 2. `all_gather` of the payloads;
/// 3. `mean = 0`, then `mean += (1/N) * deQ(payload_r)` for r = 0, 1, ..., N-1 (rank order);
/// 4. `optimizer.step(optimizer_state, params, mean)`.
/// Step 3 reads only gathered bytes in a fixed order, so every rank ends with bitwise-identical
/// parameters when they started identical.
///
/// The object owns its exchange buffers (payload, gathered payloads, mean, workspace), sized at
/// construction; `step` allocates nothing itself. The feedback and optimizer states are the
/// caller's (checkpoint them with their save()/load()).
/// @tparam Comm a host `communicator` (comm/communicator.hpp), e.g. loopback or MPI
/// @tparam Pipeline `pipeline<Feedback, Codec>` with a stateless receiver (none, ef, loco)
/// @tparam Optimizer `sgd`, `adam`, `adamw`, or any `optimizer`
/// @note A rank whose encode throws (e.g. nonfinite_policy::fail) leaves its peers waiting in
/// the all-gather; with a real transport, screen gradients before the step or abort the job.
template <communicator Comm, data_parallel_pipeline Pipeline, optimizer Optimizer>
requires(!uses_device_buffers_v<Comm>) class data_parallel {
public:
  using pipeline_type = Pipeline;
  using optimizer_type = Optimizer;
  using feedback_state = pipeline_state_t<Pipeline>;
  using optimizer_state = typename Optimizer::state_type;

  /// @brief Sizes every exchange buffer for n parameters on `comm.size()` ranks.
  /// @throws commpress::error when the pipeline or the optimizer cannot handle n elements
  data_parallel(Comm& comm, const Pipeline& pipe, const Optimizer& opt, std::uint64_t n)
      : comm_(&comm), pipe_(pipe), opt_(opt), n_(n),
        mine_(static_cast<std::size_t>(pipe.max_payload_bytes(n))),
        all_(mine_.size() * static_cast<std::size_t>(comm.size())),
        mean_(static_cast<std::size_t>(n)),
        workspace_(static_cast<std::size_t>(pipe.workspace_bytes(n))) {
    detail::throw_if(pipe.can_implement(n), "data_parallel");
    detail::throw_if(opt.can_implement(n), "data_parallel");
  }

  /// @brief A fresh error-feedback state for this rank's gradient.
  [[nodiscard]] feedback_state make_feedback_state() const { return pipe_.make_state(n_); }
  /// @brief A fresh optimizer state.
  [[nodiscard]] optimizer_state make_optimizer_state() const { return opt_.make_state(n_); }

  /// @brief Compresses `grads`, exchanges, averages and updates `params` in place.
  /// @param ctx the encode context of this rank (its step, seed and tensor id go on the wire)
  /// @throws commpress::error on size mismatches, pipeline or optimizer errors
  data_parallel_result step(const cpu::seq_t& policy, const context& ctx, feedback_state& fb,
                            optimizer_state& os, std::span<float> params,
                            std::span<const float> grads) {
    detail::check_step_sizes("data_parallel", n_, params.size(), grads.size());
    const auto sent =
        encode(policy, pipe_, fb, ctx, grads, std::span(mine_), std::span(workspace_));
    detail::gather_and_average(
        *comm_, std::span<const std::byte>(mine_), std::span(all_), std::span(mean_),
        [&](std::span<const std::byte> payload, std::span<float> acc, float weight) {
          decode_accumulate(policy, pipe_, payload, acc, weight);
        });
    opt_.step(policy, os, params, std::span<const float>(mean_));
    return {sent.bytes, sent.nonfinite};
  }

  /// @brief The average gradient of the last step (what the optimizer consumed).
  [[nodiscard]] std::span<const float> mean_gradient() const noexcept { return mean_; }
  /// @brief Bytes each rank contributes per step.
  [[nodiscard]] std::size_t payload_bytes() const noexcept { return mine_.size(); }

private:
  Comm* comm_;
  Pipeline pipe_;
  Optimizer opt_;
  std::uint64_t n_;
  std::vector<std::byte> mine_;
  std::vector<std::byte> all_;
  std::vector<float> mean_;
  std::vector<std::byte> workspace_;
};

} // namespace commpress
