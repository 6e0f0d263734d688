// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The compressed data-parallel step: compress the local gradient, all-gather the fixed-size
/// payloads through the caller's communicator, decode and average them in rank order, and
/// apply the optimizer to the average (docs/methods.md section 9.1).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "commpress/backend/cpu/policy.hpp"
#include "commpress/comm/communicator.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/optim/optimizer.hpp"
#include "commpress/pipeline/layer_policy.hpp"
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

/// @brief The feedback states of a data_parallel exchange: one pipeline state per compressed
/// tensor, in layout order (a single-tensor exchange holds one).
template <class State> struct data_parallel_feedback {
  std::vector<State> tensors;       ///< the states, in layout order of the compressed tensors
  std::vector<std::uint32_t> index; ///< the layout index of each (its tensor id offset)

  /// @brief The states as consecutive blobs, state k under tensor id `first_id + index[k]`
  /// (the ids its encodes use). With one tensor the bytes are that state's own save(first_id).
  [[nodiscard]] std::vector<std::byte> save(std::uint32_t first_id) const {
    std::vector<std::byte> out;
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      const std::vector<std::byte> blob = tensors[k].save(first_id + index[k]);
      out.insert(out.end(), blob.begin(), blob.end());
    }
    return out;
  }

  /// @brief Restores save(first_id). Every blob is loaded into a copy first, so a truncated,
  /// corrupted or foreign checkpoint throws and leaves every state unchanged.
  /// @throws commpress::error (truncated, size_mismatch, or the state's own errors)
  void load(std::span<const std::byte> blobs, std::uint32_t first_id) {
    constexpr const char* who = "data_parallel feedback";
    std::vector<State> loaded = tensors;
    std::size_t at = 0;
    for (std::size_t k = 0; k < loaded.size(); ++k) {
      const std::size_t left = blobs.size() - at;
      COMMPRESS_EXPECTS(left >= blob_fixed_bytes + 4, errc::truncated, who,
                        "the checkpoint ends before tensor state " + std::to_string(k));
      const std::byte* p = blobs.data() + at;
      const auto sizes = detail::blob_load<std::uint32_t>(p + 16);
      const auto payload = detail::blob_load<std::uint64_t>(p + 24);
      const std::uint64_t room = left - blob_fixed_bytes - 4;
      COMMPRESS_EXPECTS(sizes <= room / 8 && payload <= room - 8 * std::uint64_t{sizes},
                        errc::truncated, who,
                        "tensor state " + std::to_string(k) + " runs past the checkpoint");
      const std::size_t length =
          blob_fixed_bytes + 8 * std::size_t{sizes} + static_cast<std::size_t>(payload) + 4;
      loaded[k].load(blobs.subspan(at, length), first_id + index[k]);
      at += length;
    }
    COMMPRESS_EXPECTS(at == blobs.size(), errc::size_mismatch, who,
                      "the checkpoint holds more states than the " +
                          std::to_string(tensors.size()) + " compressed tensors");
    tensors = std::move(loaded);
  }
};

/// @brief One compressed data-parallel training step over a caller-supplied communicator.
///
/// The parameters are one flat vector, either one tensor or a layout of tensors (name, shape,
/// element type, in order) with a `layer_policy` that chooses, per tensor, the pipeline or raw
/// fp32. Protocol, identical on every rank (docs/optim.md):
/// 1. each compressed tensor i is encoded with its own feedback state and the context
///    `{seed, step, tensor_id + i}` into its slot of this rank's message (exactly
///    `max_payload_bytes` of its size, so no size exchange is needed); each uncompressed
///    tensor is copied into its slot as fp32;
/// 2. one `all_gather` of the messages: the small tensors a policy leaves uncompressed ride
///    along with the payloads instead of paying a collective's latency of their own;
/// 3. `mean = 0`, then `mean += (1/N) * deQ(slot_r)` for r = 0, 1, ..., N-1 (rank order);
/// 4. `optimizer.step(optimizer_state, params, mean)`.
/// Step 3 reads only gathered bytes in a fixed order, so every rank ends with bitwise-identical
/// parameters when they started identical.
///
/// The object owns its exchange buffers (message, gathered messages, mean, workspace), sized at
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
  using feedback_state = data_parallel_feedback<pipeline_state_t<Pipeline>>;
  using optimizer_state = typename Optimizer::state_type;

  /// @brief Sizes every exchange buffer for one tensor of n parameters, compressed, on
  /// `comm.size()` ranks.
  /// @throws commpress::error when the pipeline or the optimizer cannot handle n elements
  data_parallel(Comm& comm, const Pipeline& pipe, const Optimizer& opt, std::uint64_t n)
      : comm_(&comm), pipe_(pipe), opt_(opt), n_(n) {
    add_tensor(n, layer_verdict::compress);
    allocate();
  }

  /// @brief Sizes every exchange buffer for the tensors of `layout`, laid out one after the
  /// other in the parameter vector; `policy` decides which are compressed.
  /// @throws commpress::error when the pipeline cannot handle a compressed tensor, or the
  /// optimizer the whole vector
  data_parallel(Comm& comm, const Pipeline& pipe, const Optimizer& opt,
                std::span<const tensor_info> layout, const layer_policy& policy)
      : comm_(&comm), pipe_(pipe), opt_(opt), n_(0) {
    for (const tensor_info& t : layout) {
      add_tensor(t.count(), policy.decide(pipe_, t));
      n_ += t.count();
    }
    allocate();
  }

  /// @brief Fresh error-feedback states, one per compressed tensor.
  [[nodiscard]] feedback_state make_feedback_state() const {
    feedback_state s;
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].verdict == layer_verdict::compress) {
        s.tensors.push_back(pipe_.make_state(slots_[i].count));
        s.index.push_back(static_cast<std::uint32_t>(i));
      }
    return s;
  }
  /// @brief A fresh optimizer state.
  [[nodiscard]] optimizer_state make_optimizer_state() const { return opt_.make_state(n_); }

  /// @brief Compresses `grads`, exchanges, averages and updates `params` in place.
  /// @param ctx the encode context of this rank (its step, seed and tensor id go on the wire;
  ///        tensor i of the layout uses tensor id `ctx.tensor_id + i`)
  /// @throws commpress::error on size mismatches, a feedback state of another layout, pipeline
  ///         or optimizer errors
  data_parallel_result step(const cpu::seq_t& policy, const context& ctx, feedback_state& fb,
                            optimizer_state& os, std::span<float> params,
                            std::span<const float> grads) {
    detail::check_step_sizes("data_parallel", n_, params.size(), grads.size());
    COMMPRESS_EXPECTS(fb.tensors.size() == compressed_, errc::size_mismatch, "data_parallel",
                      "feedback state holds " + std::to_string(fb.tensors.size()) +
                          " tensor states, the layout compresses " + std::to_string(compressed_));
    data_parallel_result result{mine_.size(), 0};
    std::size_t k = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const slot& s = slots_[i];
      const auto g = grads.subspan(s.first, s.count);
      const auto out = std::span(mine_).subspan(s.at, s.bytes);
      if (s.verdict != layer_verdict::compress) {
        std::memcpy(out.data(), g.data(), s.bytes);
        result.nonfinite += static_cast<std::size_t>(
            std::count_if(g.begin(), g.end(), [](float v) { return !std::isfinite(v); }));
        continue;
      }
      context tensor_ctx = ctx;
      tensor_ctx.tensor_id = ctx.tensor_id + static_cast<std::uint32_t>(i);
      result.nonfinite +=
          encode(policy, pipe_, fb.tensors[k++], tensor_ctx, g, out, std::span(workspace_))
              .nonfinite;
    }
    detail::gather_and_average(
        *comm_, std::span<const std::byte>(mine_), std::span(all_), std::span(mean_),
        [&](std::span<const std::byte> message, std::span<float> acc, float weight) {
          for (const slot& s : slots_) {
            const auto bytes = message.subspan(s.at, s.bytes);
            const auto sum = acc.subspan(s.first, s.count);
            if (s.verdict == layer_verdict::compress) {
              decode_accumulate(policy, pipe_, bytes, sum, weight);
              continue;
            }
            for (std::size_t j = 0; j < s.count; ++j) {
              float v;
              std::memcpy(&v, bytes.data() + 4 * j, 4);
              sum[j] = sum[j] + weight * v;
            }
          }
        });
    opt_.step(policy, os, params, std::span<const float>(mean_));
    return result;
  }

  /// @brief The average gradient of the last step (what the optimizer consumed).
  [[nodiscard]] std::span<const float> mean_gradient() const noexcept { return mean_; }
  /// @brief Bytes each rank contributes per step.
  [[nodiscard]] std::size_t payload_bytes() const noexcept { return mine_.size(); }
  /// @brief The policy's verdict on tensor i of the layout (compress for a single tensor).
  [[nodiscard]] layer_verdict verdict(std::size_t i) const { return slots_.at(i).verdict; }

private:
  /// Tensor i of the layout: its elements in the parameter vector, its bytes in a message.
  struct slot {
    std::size_t first;
    std::size_t count;
    std::size_t at;
    std::size_t bytes;
    layer_verdict verdict;
  };

  void add_tensor(std::uint64_t count, layer_verdict verdict) {
    const std::size_t first = slots_.empty() ? 0 : slots_.back().first + slots_.back().count;
    const std::size_t at = slots_.empty() ? 0 : slots_.back().at + slots_.back().bytes;
    std::uint64_t bytes = 4 * count;
    if (verdict == layer_verdict::compress) {
      detail::throw_if(pipe_.can_implement(count), "data_parallel");
      bytes = pipe_.max_payload_bytes(count);
      workspace_bytes_ = std::max(workspace_bytes_, pipe_.workspace_bytes(count));
      ++compressed_;
    }
    slots_.push_back(
        {first, static_cast<std::size_t>(count), at, static_cast<std::size_t>(bytes), verdict});
  }

  void allocate() {
    detail::throw_if(opt_.can_implement(n_), "data_parallel");
    const std::size_t message = slots_.empty() ? 0 : slots_.back().at + slots_.back().bytes;
    mine_.resize(message);
    all_.resize(message * static_cast<std::size_t>(comm_->size()));
    mean_.resize(static_cast<std::size_t>(n_));
    workspace_.resize(static_cast<std::size_t>(workspace_bytes_));
  }

  Comm* comm_;
  Pipeline pipe_;
  Optimizer opt_;
  std::uint64_t n_;
  std::vector<slot> slots_;
  std::size_t compressed_ = 0;
  std::uint64_t workspace_bytes_ = 0;
  std::vector<std::byte> mine_;
  std::vector<std::byte> all_;
  std::vector<float> mean_;
  std::vector<std::byte> workspace_;
};

} // namespace commpress
