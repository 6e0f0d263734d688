// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// 1-bit Adam (Tang et al., ICML 2021; DeepSpeed `OnebitAdam`), docs/methods.md section 8:
/// Adam with an uncompressed gradient exchange for `freeze_step` warm-up steps, then a frozen
/// variance and a compressed, error-compensated exchange of the momentum, either all-gathered
/// (`gather_exchange`) or through DeepSpeed's two-error-point `compressed_allreduce`
/// (`sharded_exchange`).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/collective/reduce_scatter.hpp"
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

/// @brief What one 1-bit Adam step did on this rank: the bytes it encoded, its non-finite local
/// inputs, and (wire_bytes) the bytes it sent to its peers under the bandwidth-optimal schedule
/// of the step's exchange (a ring all-gather forwards N - 1 blocks; docs/collectives.md), the
/// payload lengths of a variable-length exchange included; 0 on one rank.
struct onebit_adam_result : data_parallel_result {};

namespace detail {

/// Throws unless a feedback state that keeps a buffer (ef, loco, dgc) holds n elements; a
/// stateless one (`none`) always fits.
template <class State>
void check_onebit_feedback(const State& s, std::uint64_t n, const std::string& what) {
  if constexpr (requires { s.size(); })
    COMMPRESS_EXPECTS(s.size() == n, errc::size_mismatch, "onebit_adam",
                      what + " holds " + std::to_string(s.size()) + " elements, expected " +
                          std::to_string(n));
}

} // namespace detail

/// @brief The compression-stage exchange of `onebit_adam` as an all-gather (docs/methods.md
/// 9.1), the default: every rank encodes its local momentum with its worker error, the payloads
/// are all-gathered and every rank averages all N in rank order. One error-feedback point; the
/// bytes each rank sends grow with N ((N - 1) payloads of the whole tensor). Payloads of
/// variable length (qsgd's Elias coding) travel at their length, as in all_gather_compressed:
/// an all-gather of the 8-byte lengths (each checked to lie between the header and the slot,
/// else errc::corrupt), then one of the payloads zero-padded to the longest.
struct gather_exchange {
  /// @brief The buffers and the call of this exchange for one tensor on one communicator.
  template <class Comm, class Pipeline> class runner {
  public:
    using feedback_state = pipeline_state_t<Pipeline>; ///< the worker error

    runner(const gather_exchange&, Comm& comm, const Pipeline& pipe, std::uint64_t n)
        : comm_(&comm), pipe_(pipe), n_(n),
          mine_(static_cast<std::size_t>(pipe.max_payload_bytes(n))),
          all_(mine_.size() * static_cast<std::size_t>(comm.size())),
          workspace_(static_cast<std::size_t>(pipe.workspace_bytes(n))),
          my_length_(variable_payloads(pipe) ? payload_length_bytes : 0),
          lengths_(my_length_.size() * static_cast<std::size_t>(comm.size())) {}

    [[nodiscard]] feedback_state make_state() const { return pipe_.make_state(n_); }
    /// @brief Bytes of this rank's payload in one exchange: exact for a fixed-length codec, the
    /// largest where the payloads vary in length (variable()).
    [[nodiscard]] std::size_t payload_bytes() const noexcept { return mine_.size(); }
    /// @brief Whether the payloads vary in length, so that an exchange sends their lengths first.
    [[nodiscard]] bool variable() const noexcept { return !my_length_.empty(); }
    /// @brief Bytes this rank sends in one exchange: its payload to each of the N - 1 peers.
    /// Exact for fixed-length payloads; where they vary (variable()) the worst case,
    /// (N - 1) * (8 + payload_bytes()): an exchange sends its length and a block as long as the
    /// longest payload of that exchange, which its onebit_adam_result::wire_bytes reports.
    [[nodiscard]] std::size_t wire_bytes() const noexcept {
      return static_cast<std::size_t>(comm_->size() - 1) * (my_length_.size() + mine_.size());
    }
    /// @brief Throws, before anything is written, when `fb` does not fit the tensor.
    void check(const feedback_state& fb) const {
      detail::check_onebit_feedback(fb, n_, "the worker error");
    }

    /// @brief `avg = sum_r (1/N) * deQ(encode(pipe, fb_r, ctx, local_r))`, rank order.
    onebit_adam_result run(const cpu::seq_t& policy, const context& ctx, feedback_state& fb,
                           std::span<const float> local, std::span<float> avg) {
      const auto sent =
          encode(policy, pipe_, fb, ctx, local, std::span(mine_), std::span(workspace_));
      const auto ranks = static_cast<std::size_t>(comm_->size());
      // The block every rank sends: the slot, or the longest payload of this exchange.
      std::size_t block = mine_.size();
      std::size_t wire = 0;
      if (variable()) {
        // Zero padding keeps the wire bytes defined where a payload is shorter than its block.
        std::fill(mine_.begin() + static_cast<std::ptrdiff_t>(sent.bytes), mine_.end(),
                  std::byte{0});
        detail::store_length(std::span(my_length_), 0, sent.bytes);
        block = static_cast<std::size_t>(
            detail::exchange_lengths(*comm_, std::span<const std::byte>(my_length_),
                                     std::span(lengths_), mine_.size(), "onebit_adam"));
        wire += (ranks - 1) * my_length_.size();
      }
      wire += (ranks - 1) * block;
      detail::gather_and_average(
          *comm_, std::span<const std::byte>(mine_).first(block),
          std::span(all_).first(ranks * block), avg,
          [&](std::span<const std::byte> payload, std::size_t r, std::span<float> acc,
              float weight) {
            const std::size_t length = variable() ? static_cast<std::size_t>(detail::load_length(
                                                        std::span<const std::byte>(lengths_), r))
                                                  : block;
            decode_accumulate(policy, pipe_, payload.first(length), acc, weight);
          });
      return {{sent.bytes, sent.nonfinite, wire}};
    }

  private:
    Comm* comm_;
    Pipeline pipe_;
    std::uint64_t n_;
    std::vector<std::byte> mine_;
    std::vector<std::byte> all_;
    std::vector<std::byte> workspace_;
    std::vector<std::byte> my_length_; ///< this rank's payload length (variable payloads only)
    std::vector<std::byte> lengths_;   ///< every rank's (variable payloads only)
  };
};

/// @brief The compression-stage exchange of `onebit_adam` as DeepSpeed's `compressed_allreduce`
/// (Tang et al. 2021; docs/methods.md 9.3), through `sharded_plan` with the same
/// pipeline at both error-feedback points:
/// 1. every rank encodes chunk j of its local momentum with its worker error for chunk j and
///    sends it to owner j (all-to-all); owner j averages the N chunks in rank order;
/// 2. owner j encodes that averaged shard with its server error and the shards are
///    all-gathered, so every rank decodes the same bytes into the same momentum.
/// Each rank sends (N - 1) worker chunks and (N - 1) copies of its shard's payload, about
/// 2 (N - 1) / N payloads of the whole tensor: the traffic per rank stays flat in N, at the price
/// of a second compression (and a second error buffer of n / N elements).
struct sharded_exchange {
  /// Chunks are a multiple of this many elements; 0: the codec's chunk_alignment.
  std::uint64_t align = 0;

  /// @brief The plan, workspace and call of this exchange for one tensor on one communicator.
  template <class Comm, collective_pipeline Pipeline> class runner {
  public:
    using plan_type = sharded_plan<Pipeline>;
    /// One worker error per destination chunk and the server error of the owned shard.
    using feedback_state = typename plan_type::state_type;

    /// @throws commpress::error when the pipeline cannot run on some chunk length
    runner(const sharded_exchange& ex, Comm& comm, const Pipeline& pipe, std::uint64_t n)
        : comm_(&comm), plan_(pipe, n, static_cast<int>(comm.size()),
                              sharded_options{.scale = scaling::mean, .align = ex.align}),
          workspace_(static_cast<std::size_t>(plan_.workspace_bytes())) {}

    [[nodiscard]] feedback_state make_state() const { return plan_.make_state(rank()); }
    [[nodiscard]] const plan_type& plan() const noexcept { return plan_; }
    /// @brief Bytes this rank encodes in one exchange: its N worker chunks and its shard.
    [[nodiscard]] std::size_t payload_bytes() const {
      std::uint64_t b = plan_.server_pipeline().max_payload_bytes(plan_.shard_size(rank()));
      for (int j = 0; j < plan_.ranks(); ++j)
        b += plan_.worker_pipeline().max_payload_bytes(plan_.shard_size(j));
      return static_cast<std::size_t>(b);
    }
    /// @brief Bytes this rank sends in one exchange: a worker slot to each peer, then its
    /// server slot to each peer (the plan's reduce-scatter and all-gather halves).
    [[nodiscard]] std::size_t wire_bytes() const noexcept {
      return static_cast<std::size_t>(plan_.reduce_scatter_wire_bytes() +
                                      plan_.all_gather_wire_bytes());
    }
    /// @brief Throws, before anything is written, when `fb` was made for another world size,
    /// rank or tensor size (the collective would otherwise fail part-way through the chunks).
    void check(const feedback_state& fb) const {
      COMMPRESS_EXPECTS(fb.worker.size() == static_cast<std::size_t>(plan_.ranks()),
                        errc::size_mismatch, "onebit_adam",
                        "the feedback state holds " + std::to_string(fb.worker.size()) +
                            " worker errors, the communicator has " +
                            std::to_string(plan_.ranks()) + " ranks");
      for (int j = 0; j < plan_.ranks(); ++j)
        detail::check_onebit_feedback(fb.worker[static_cast<std::size_t>(j)], plan_.shard_size(j),
                                      "worker error " + std::to_string(j));
      detail::check_onebit_feedback(fb.server, plan_.shard_size(rank()), "the server error");
    }

    /// @brief `avg` = every rank's decode of the owners' server-compressed shard averages.
    onebit_adam_result run(const cpu::seq_t& policy, const context& ctx, feedback_state& fb,
                           std::span<const float> local, std::span<float> avg) {
      const std::span<std::byte> ws(workspace_);
      // sharded_all_reduce_compressed, in its two halves so that `nonfinite` counts this
      // rank's own momentum only (the owned shard mixes in every rank's).
      const std::span<float> shard = plan_.carve(ws).shard.first(plan_.shard_size(rank()));
      const collective_result a =
          reduce_scatter_compressed(*comm_, policy, plan_, fb, ctx, local, shard, ws);
      const collective_result b = all_gather_shard_compressed(
          *comm_, policy, plan_, fb, ctx, std::span<const float>(shard), avg, ws);
      return {{a.payload_bytes + b.payload_bytes, a.nonfinite, a.wire_bytes + b.wire_bytes}};
    }

  private:
    [[nodiscard]] int rank() const { return static_cast<int>(comm_->rank()); }

    Comm* comm_;
    plan_type plan_;
    std::vector<std::byte> workspace_;
  };
};

/// @brief An exchange policy of `onebit_adam`: `gather_exchange`, `sharded_exchange`, or a
/// type with the same `runner<Comm, Pipeline>` interface.
template <class E, class Comm, class Pipeline>
concept onebit_exchange = requires {
  typename E::template runner<Comm, Pipeline>;
}
&&std::constructible_from<typename E::template runner<Comm, Pipeline>, const E&, Comm&,
                          const Pipeline&, std::uint64_t>;

/// @brief 1-bit Adam over a caller-supplied communicator.
///
/// Each step (docs/optim.md):
/// - warm-up (`state.step < freeze_step`): all-gather of the local gradients as lossless
///   `identity` payloads, rank-ordered mean (as `data_parallel`), then one `adamw` step;
/// - compression stage: local momentum update, then the `Exchange` replaces m by the
///   compressed average of the ranks' local momenta, then the frozen-v update.
/// The exchange is one of:
/// - `gather_exchange` (default): `encode(pipe, worker_error, ctx, m)`, all-gather of the
///   payloads, `m = sum_r (1/N) * deQ(payload_r)` in rank order (docs/methods.md 9.1). One
///   error point; each rank sends (N - 1) payloads of the whole tensor.
/// - `sharded_exchange`: DeepSpeed's `compressed_allreduce` (Tang et al. 2021): a worker error
///   per destination chunk, all-to-all, owner-side rank-ordered average, a server error on the
///   owned shard, all-gather of the shards (docs/methods.md 9.3). Each rank sends about
///   2 (N - 1) / N payloads of the whole tensor, whatever N.
/// Either way every rank decodes the same bytes in the same order, so all ranks hold bitwise
/// identical momenta and parameters. The errors are the pipeline's error-feedback state (use
/// `pipeline<ef, sign{rms}>` for DeepSpeed's compressor).
/// @tparam Comm a host `communicator`
/// @tparam Pipeline a `data_parallel_pipeline`, usually `pipeline<ef, sign>`
/// @tparam Exchange `gather_exchange` or `sharded_exchange` (an `onebit_exchange`)
/// @note A rank whose encode throws (nonfinite_policy::fail) leaves its peers waiting in the
/// exchange, as in `data_parallel`.
template <communicator Comm, data_parallel_pipeline Pipeline, class Exchange = gather_exchange>
requires(!uses_device_buffers_v<Comm> &&
         onebit_exchange<Exchange, Comm, Pipeline>) class onebit_adam {
public:
  using exchange_type = Exchange;
  using exchange_runner = typename Exchange::template runner<Comm, Pipeline>;
  /// The worker error (`gather_exchange`) or the worker and server errors (`sharded_exchange`).
  using feedback_state = typename exchange_runner::feedback_state;

  /// @brief Sizes the warm-up buffers (lossless payloads) and the exchange's buffers for n
  /// parameters.
  /// @throws commpress::error when the pipeline or the configuration cannot handle n elements
  onebit_adam(Comm& comm, const Pipeline& pipe, const onebit_adam_config& cfg, std::uint64_t n,
              const Exchange& exchange = {})
      : comm_(&comm), cfg_(cfg), n_(checked_size(pipe, cfg, n)),
        warmup_bytes_(static_cast<std::size_t>(max_payload_bytes(identity{}, n))),
        mine_(warmup_bytes_), all_(warmup_bytes_ * static_cast<std::size_t>(comm.size())),
        mean_(static_cast<std::size_t>(n)), exchange_(exchange, comm, pipe, n) {}

  /// @brief Zeroed moments (m, v) and step count.
  [[nodiscard]] adam_state make_state() const { return cfg_.warmup_optimizer().make_state(n_); }
  /// @brief Zeroed error-feedback state for this rank (the exchange's `feedback_state`).
  [[nodiscard]] feedback_state make_feedback_state() const { return exchange_.make_state(); }

  /// @brief True once `st` has passed the warm-up: v is frozen and the momentum is compressed.
  [[nodiscard]] bool compressing(const adam_state& st) const noexcept {
    return st.step >= cfg_.freeze_step;
  }

  /// @brief One step: exchanges (lossless or compressed, by `st.step`) and updates `params`.
  /// @param ctx this rank's encode context for the compressed stage
  /// @returns the bytes this rank encoded and sent, and its count of non-finite local inputs
  /// @throws commpress::error on size mismatches (params, grads, the moments, or a feedback
  /// state made for another world size or tensor), before any state changes
  onebit_adam_result step(const cpu::seq_t& policy, const context& ctx, adam_state& st,
                          feedback_state& feedback, std::span<float> params,
                          std::span<const float> grads) {
    detail::check_step_sizes("onebit_adam", n_, params.size(), grads.size());
    detail::check_step_sizes("onebit_adam", st.n, params.size(), grads.size());
    return compressing(st) ? compressed_step(policy, ctx, st, feedback, params, grads)
                           : warmup_step(policy, ctx, st, params, grads);
  }

  /// @brief The gradient average (warm-up) or momentum average (compression stage) of the
  /// last step.
  [[nodiscard]] std::span<const float> last_average() const noexcept { return mean_; }
  /// @brief Bytes this rank sends in one warm-up step ((N - 1) lossless payloads).
  [[nodiscard]] std::size_t warmup_wire_bytes() const noexcept {
    return static_cast<std::size_t>(comm_->size() - 1) * warmup_bytes_;
  }
  /// @brief Bytes this rank sends in one compression-stage step.
  [[nodiscard]] std::size_t compressed_wire_bytes() const { return exchange_.wire_bytes(); }
  /// @brief The compression-stage exchange (its plan, for `sharded_exchange`).
  [[nodiscard]] const exchange_runner& exchange() const noexcept { return exchange_; }

private:
  static std::uint64_t checked_size(const Pipeline& pipe, const onebit_adam_config& cfg,
                                    std::uint64_t n) {
    detail::throw_if(pipe.can_implement(n), "onebit_adam");
    detail::throw_if(cfg.can_implement(n), "onebit_adam");
    return n;
  }

  onebit_adam_result warmup_step(const cpu::seq_t& policy, const context& ctx, adam_state& st,
                                 std::span<float> params, std::span<const float> grads) {
    const auto sent = encode(policy, identity{}, ctx, grads, std::span(mine_));
    detail::gather_and_average(
        *comm_, std::span<const std::byte>(mine_), std::span(all_), std::span(mean_),
        [&](std::span<const std::byte> payload, std::size_t, std::span<float> acc, float weight) {
          decode_accumulate(policy, identity{}, payload, acc, weight);
        });
    cfg_.warmup_optimizer().step(policy, st, params, std::span<const float>(mean_));
    return {{sent.bytes, sent.nonfinite, warmup_wire_bytes()}};
  }

  onebit_adam_result compressed_step(const cpu::seq_t& policy, const context& ctx, adam_state& st,
                                     feedback_state& feedback, std::span<float> params,
                                     std::span<const float> grads) {
    COMMPRESS_EXPECTS(st.exp_avg.size() == n_ && st.exp_avg_sq.size() == n_, errc::size_mismatch,
                      "onebit_adam", "the moments do not hold n elements");
    exchange_.check(feedback);
    for (std::size_t i = 0; i < mean_.size(); ++i)
      mean_[i] = cfg_.local_momentum(st.exp_avg[i], grads[i]);
    // The average goes straight into m: every rank leaves with the same momentum.
    const onebit_adam_result res =
        exchange_.run(policy, ctx, feedback, std::span<const float>(mean_), std::span(st.exp_avg));
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i] = cfg_.frozen_update(params[i], st.exp_avg[i], st.exp_avg_sq[i]);
    std::copy(st.exp_avg.begin(), st.exp_avg.end(), mean_.begin());
    ++st.step;
    return res;
  }

  Comm* comm_;
  onebit_adam_config cfg_;
  std::uint64_t n_;
  std::size_t warmup_bytes_;
  std::vector<std::byte> mine_;
  std::vector<std::byte> all_;
  std::vector<float> mean_;
  exchange_runner exchange_;
};

} // namespace commpress
