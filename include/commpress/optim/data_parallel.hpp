// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The compressed data-parallel step: compress the local gradient, all-gather the payloads
/// through the caller's communicator, decode and average them in rank order, and apply the
/// optimizer to the average (docs/methods.md section 9.1). Payloads of fixed length fill their
/// slots; those of variable length (qsgd's Elias coding) travel at the length their encodes
/// wrote, after an all-gather of those lengths (collective/payload_length.hpp).

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
#include "commpress/collective/payload_length.hpp"
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
  /// Bytes of this rank's message: its payloads as their encodes wrote them and its
  /// uncompressed tensors (the padding of a variable-length exchange not included)
  std::size_t payload_bytes = 0;
  std::size_t nonfinite = 0; ///< NaN/Inf elements in this rank's local input
  /// Bytes this rank sent to its peers (a ring all-gather forwards N - 1 blocks;
  /// docs/collectives.md), the payload lengths of a variable-length exchange included; 0 on
  /// one rank
  std::size_t wire_bytes = 0;
};

namespace detail {

/// Averages the gathered payloads: `out = 0; out += (1/N) * deQ(payload_r)` for r = 0..N-1 in
/// rank order, so every rank computes the same bits from the same gathered bytes. `accumulate`
/// gets rank r's block of `mine.size()` bytes and r (to find the lengths r reported, where the
/// payloads vary in length).
template <class Comm, class AccumulateOne>
void gather_and_average(Comm& comm, std::span<const std::byte> mine, std::span<std::byte> all,
                        std::span<float> out, AccumulateOne&& accumulate) {
  comm.all_gather(mine, all);
  std::fill(out.begin(), out.end(), 0.0f);
  const auto ranks = static_cast<std::size_t>(comm.size());
  const float weight = 1.0f / static_cast<float>(ranks);
  for (std::size_t r = 0; r < ranks; ++r)
    accumulate(std::span<const std::byte>(all.subspan(r * mine.size(), mine.size())), r, out,
               weight);
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
///    `max_payload_bytes` of its size for a fixed-length codec, so no size exchange is needed);
///    each uncompressed tensor is copied into its slot as fp32;
/// 2. one `all_gather` of the messages: the small tensors a policy leaves uncompressed ride
///    along with the payloads instead of paying a collective's latency of their own;
/// 3. `mean = 0`, then `mean += (1/N) * deQ(slot_r)` for r = 0, 1, ..., N-1 (rank order);
/// 4. `optimizer.step(optimizer_state, params, mean)`.
/// Step 3 reads only gathered bytes in a fixed order, so every rank ends with bitwise-identical
/// parameters when they started identical.
///
/// Where the pipeline's payloads vary in length (variable_payloads: qsgd's Elias coding), step 1
/// writes each tensor right after the previous one instead of at its slot, and step 2 takes two
/// calls: an all-gather of every rank's payload lengths (8 bytes per compressed tensor, each
/// checked to lie between the header and its slot, else errc::corrupt on every rank), then of
/// the messages, each zero-padded to the longest message of the step; each payload is decoded
/// at the length its rank reported. Fixed-length codecs keep their slots and their one call.
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
    constexpr const char* who = "data_parallel";
    data_parallel_result result;
    // Where the next tensor's bytes go: its slot, or right after the previous payload where the
    // payloads vary in length (each encode still has its whole slot's room: the payloads before
    // it took no more than their slots).
    std::size_t at = 0;
    std::size_t k = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const slot& s = slots_[i];
      const std::size_t put = variable_ ? at : s.at;
      const auto g = grads.subspan(s.first, s.count);
      const auto out = std::span(mine_).subspan(put, s.bytes);
      if (s.verdict != layer_verdict::compress) {
        std::memcpy(out.data(), g.data(), s.bytes);
        result.nonfinite += static_cast<std::size_t>(
            std::count_if(g.begin(), g.end(), [](float v) { return !std::isfinite(v); }));
        at = put + s.bytes;
        continue;
      }
      context tensor_ctx = ctx;
      tensor_ctx.tensor_id = ctx.tensor_id + static_cast<std::uint32_t>(i);
      const step_result sent =
          encode(policy, pipe_, fb.tensors[k], tensor_ctx, g, out, std::span(workspace_));
      result.nonfinite += sent.nonfinite;
      if (variable_)
        detail::store_length(std::span(my_lengths_), k, sent.bytes);
      at = put + (variable_ ? static_cast<std::size_t>(sent.bytes) : s.bytes);
      ++k;
    }
    result.payload_bytes = at;

    const auto ranks = static_cast<std::size_t>(comm_->size());
    // The block every rank sends: the whole message, or the longest message of this step.
    std::size_t block = mine_.size();
    if (variable_) {
      detail::exchange_lengths(
          *comm_, std::span<const std::byte>(my_lengths_), std::span(lengths_),
          [this](std::size_t p) { return std::uint64_t{compressed_slot_bytes_[p]}; }, who);
      block = 0;
      for (std::size_t r = 0; r < ranks; ++r)
        block = std::max(block, message_bytes(r));
      // Zero padding keeps the wire bytes defined past this rank's message.
      std::fill(mine_.begin() + static_cast<std::ptrdiff_t>(at),
                mine_.begin() + static_cast<std::ptrdiff_t>(block), std::byte{0});
      result.wire_bytes += (ranks - 1) * my_lengths_.size();
    }
    result.wire_bytes += (ranks - 1) * block;
    detail::gather_and_average(
        *comm_, std::span<const std::byte>(mine_).first(block),
        std::span(all_).first(ranks * block), std::span(mean_),
        [&](std::span<const std::byte> message, std::size_t r, std::span<float> acc, float weight) {
          std::size_t from = 0; // where the next tensor's bytes start in the variable layout
          std::size_t c = 0;    // index of the next compressed tensor
          for (const slot& s : slots_) {
            const bool compressed = s.verdict == layer_verdict::compress;
            std::size_t length = s.bytes;
            if (compressed && variable_)
              length = static_cast<std::size_t>(
                  detail::load_length(std::span<const std::byte>(lengths_), r * compressed_ + c));
            const auto bytes = message.subspan(variable_ ? from : s.at, length);
            from += length;
            const auto sum = acc.subspan(s.first, s.count);
            if (compressed) {
              ++c;
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
  /// @brief Bytes each rank contributes per step: exact for fixed-length payloads, the largest
  /// where they vary in length (variable()).
  [[nodiscard]] std::size_t payload_bytes() const noexcept { return mine_.size(); }
  /// @brief Whether the payloads vary in length, so that a step exchanges their lengths first.
  [[nodiscard]] bool variable() const noexcept { return variable_; }
  /// @brief Bytes each rank sends per step: its message to each of the N - 1 peers. Exact for
  /// fixed-length payloads; where they vary (variable()) the worst case, (N - 1) * (8 C +
  /// payload_bytes()) for C compressed tensors: a step sends its C lengths and a block as long as
  /// the longest message of that step, which its data_parallel_result::wire_bytes reports.
  [[nodiscard]] std::size_t wire_bytes() const noexcept {
    return static_cast<std::size_t>(comm_->size() - 1) * (my_lengths_.size() + mine_.size());
  }
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
      compressed_slot_bytes_.push_back(static_cast<std::size_t>(bytes));
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
    variable_ = compressed_ > 0 && variable_payloads(pipe_);
    if (variable_) {
      my_lengths_.resize(static_cast<std::size_t>(payload_length_bytes) * compressed_);
      lengths_.resize(my_lengths_.size() * static_cast<std::size_t>(comm_->size()));
    }
    for (const slot& s : slots_)
      if (s.verdict != layer_verdict::compress)
        raw_bytes_ += s.bytes;
  }

  /// The length of rank r's message in a variable-length exchange, from the lengths it
  /// reported (each checked against its slot, so the sum is at most the whole message).
  [[nodiscard]] std::size_t message_bytes(std::size_t r) const {
    std::size_t bytes = raw_bytes_;
    for (std::size_t c = 0; c < compressed_; ++c)
      bytes += static_cast<std::size_t>(
          detail::load_length(std::span<const std::byte>(lengths_), r * compressed_ + c));
    return bytes;
  }

  Comm* comm_;
  Pipeline pipe_;
  Optimizer opt_;
  std::uint64_t n_;
  std::vector<slot> slots_;
  std::size_t compressed_ = 0;
  std::vector<std::size_t> compressed_slot_bytes_; ///< the slot of each compressed tensor
  std::size_t raw_bytes_ = 0;                      ///< the uncompressed tensors' bytes
  bool variable_ = false;
  std::vector<std::byte> my_lengths_; ///< this rank's payload lengths (variable_ only)
  std::vector<std::byte> lengths_;    ///< every rank's, rank after rank (variable_ only)
  std::uint64_t workspace_bytes_ = 0;
  std::vector<std::byte> mine_;
  std::vector<std::byte> all_;
  std::vector<float> mean_;
  std::vector<std::byte> workspace_;
};

} // namespace commpress
