// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The sharded compressed all-reduce with two error-feedback points (docs/methods.md 9.3, 8,
/// 7.3; property E8): 1-bit Adam's compressed_allreduce, AQ-SGD's data-parallel path and
/// LoCo's qgZ path, in their one-level form.
///
/// 1. `reduce_scatter_compressed`: rank i encodes chunk j of its tensor with worker feedback
///    state j (one state per destination chunk, d elements in all), the payloads go to their
///    owners by all-to-all, and owner j decodes its N received chunks and averages them in rank
///    order. Alone, this is the sharded (FSDP / ZeRO) gradient path: each rank keeps its shard.
/// 2. `all_gather_shard_compressed`: the owner encodes its shard with the server pipeline and
///    its server feedback state (d / N elements), the payloads are all-gathered, and every rank
///    decodes every chunk into the full tensor.
/// `sharded_all_reduce_compressed` runs both.
///
/// Payloads travel in slots of the plan's fixed size, the largest payload over the chunk
/// lengths. Where a pipeline's payloads vary in length (variable_payloads: qsgd's Elias coding),
/// its half first all-gathers the lengths its encodes wrote and then sends blocks as long as the
/// longest payload of that call instead (docs/collectives.md, "Variable-length payloads").

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "commpress/collective/layout.hpp"

namespace commpress {

/// @brief Options of the sharded path.
struct sharded_options {
  scaling scale = scaling::mean; ///< the owner averages (1/N) or sums its received chunks
  /// Chunks are a multiple of this many elements; 0: the least common multiple of both
  /// codecs' chunk_alignment (block, column or row lengths), so no group straddles a chunk.
  std::uint64_t align = 0;
};

/// @brief Sizes, chunk layout and buffers of the sharded path for one tensor and world size.
/// @tparam Worker the pipeline of the first EF point (chunks of the full tensor)
/// @tparam Server the pipeline of the second EF point (the owner's averaged shard)
template <collective_pipeline Worker, collective_pipeline Server = Worker> class sharded_plan {
public:
  using worker_state = collective_state_t<Worker>;
  using server_state = collective_state_t<Server>;

  /// @brief One rank's feedback state: a worker state per destination chunk (d elements in
  /// all) and the server state of the shard it owns (d / N elements).
  struct state_type {
    std::vector<worker_state> worker;
    server_state server;
  };

  /// @throws commpress::error when a pipeline cannot run on some chunk length, or ranks < 1
  sharded_plan(const Worker& worker, const Server& server, std::uint64_t n, int ranks,
               sharded_options opt = {})
      : worker_(worker), server_(server), opt_(opt),
        layout_(chunk_layout::make(n, ranks,
                                   opt.align != 0 ? opt.align
                                                  : std::lcm(chunk_alignment(worker.codec),
                                                             chunk_alignment(server.codec)))) {
    for (int j = 0; j < ranks; ++j) {
      const std::uint64_t len = layout_.length(j);
      detail::check_pipeline(worker, len, "sharded");
      detail::check_pipeline(server, len, "sharded");
      worker_slot_ = std::max(worker_slot_, worker.max_payload_bytes(len));
      server_slot_ = std::max(server_slot_, server.max_payload_bytes(len));
      pipe_ws_ = std::max({pipe_ws_, worker.workspace_bytes(len), server.workspace_bytes(len)});
    }
  }
  /// @brief The same pipeline at both EF points.
  sharded_plan(const Worker& pipe, std::uint64_t n, int ranks,
               sharded_options opt = {}) requires std::same_as<Worker, Server>
      : sharded_plan(pipe, pipe, n, ranks, opt) {}

  [[nodiscard]] const Worker& worker_pipeline() const noexcept { return worker_; }
  [[nodiscard]] const Server& server_pipeline() const noexcept { return server_; }
  [[nodiscard]] const sharded_options& options() const noexcept { return opt_; }
  [[nodiscard]] const chunk_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return layout_.n; }
  [[nodiscard]] int ranks() const noexcept { return layout_.ranks; }
  /// @brief Elements of the shard `rank` owns.
  [[nodiscard]] std::uint64_t shard_size(int rank) const noexcept { return layout_.length(rank); }
  /// @brief All-to-all slot per peer: the largest worker payload over the chunk lengths.
  [[nodiscard]] std::uint64_t worker_slot_bytes() const noexcept { return worker_slot_; }
  /// @brief All-gather slot per rank: the largest server payload over the chunk lengths.
  [[nodiscard]] std::uint64_t server_slot_bytes() const noexcept { return server_slot_; }
  /// @brief Whether the worker payloads vary in length (the reduce-scatter half exchanges
  /// their lengths first).
  [[nodiscard]] bool worker_variable() const noexcept { return variable_payloads(worker_); }
  /// @brief Whether the server payloads vary in length (the all-gather half exchanges their
  /// lengths first).
  [[nodiscard]] bool server_variable() const noexcept { return variable_payloads(server_); }
  /// @brief Bytes each rank sends in the reduce-scatter half: one slot to each peer. Exact for
  /// fixed-length worker payloads; for variable ones (worker_variable()) the worst case,
  /// (N - 1) * (8 N + slot): a call all-gathers its N payload lengths and then sends each peer
  /// a block as long as the longest worker payload of that call, which its
  /// collective_result::wire_bytes reports.
  [[nodiscard]] std::uint64_t reduce_scatter_wire_bytes() const noexcept {
    const std::uint64_t lengths =
        worker_variable() ? payload_length_bytes * static_cast<std::uint64_t>(ranks()) : 0;
    return static_cast<std::uint64_t>(ranks() - 1) * (lengths + worker_slot_);
  }
  /// @brief Bytes each rank sends in the all-gather half (ring: N - 1 slots). Exact for
  /// fixed-length server payloads; for variable ones (server_variable()) the worst case,
  /// (N - 1) * (8 + slot): a call all-gathers its payload length and then a block as long as
  /// the longest server payload of that call, which its collective_result::wire_bytes reports.
  [[nodiscard]] std::uint64_t all_gather_wire_bytes() const noexcept {
    const std::uint64_t length = server_variable() ? payload_length_bytes : 0;
    return static_cast<std::uint64_t>(ranks() - 1) * (length + server_slot_);
  }

  /// @brief A fresh feedback state for rank `rank` (the server state is sized to its shard).
  [[nodiscard]] state_type make_state(int rank) const {
    COMMPRESS_EXPECTS(rank >= 0 && rank < ranks(), errc::invalid_argument, "collective",
                      "sharded: rank out of range");
    state_type s{{}, server_.make_state(layout_.length(rank))};
    s.worker.reserve(static_cast<std::size_t>(ranks()));
    for (int j = 0; j < ranks(); ++j)
      s.worker.push_back(worker_.make_state(layout_.length(j)));
    return s;
  }
  [[nodiscard]] std::uint64_t workspace_bytes() const { return carve({}).used; }

  /// The workspace regions of one call. The lengths are there only where a pipeline's payloads
  /// vary in length: this rank's (N worker payloads, or its one server payload) and everyone's.
  struct regions {
    std::span<std::byte> send, recv, server_payload, gathered, pipe_ws;
    std::span<float> shard;
    std::span<std::byte> my_lengths, lengths;
    std::uint64_t used = 0;
  };
  [[nodiscard]] regions carve(std::span<std::byte> ws) const {
    detail::ws_carver c(ws);
    const auto n = static_cast<std::uint64_t>(ranks());
    regions r;
    r.send = c.take(n * worker_slot_);
    r.recv = c.take(n * worker_slot_);
    r.server_payload = c.take(server_slot_);
    r.gathered = c.take(n * server_slot_);
    r.pipe_ws = c.take(pipe_ws_);
    r.shard = c.take_floats(layout_.chunk);
    if (worker_variable() || server_variable()) {
      r.my_lengths = c.take(payload_length_bytes * n);
      r.lengths = c.take(payload_length_bytes * n * n);
    }
    r.used = c.used();
    return r;
  }

private:
  Worker worker_;
  Server server_;
  sharded_options opt_;
  chunk_layout layout_;
  std::uint64_t worker_slot_ = 0;
  std::uint64_t server_slot_ = 0;
  std::uint64_t pipe_ws_ = 0;
};

namespace detail {

template <class Comm, class Plan>
void check_sharded_call(const Comm& comm, const Plan& plan, const typename Plan::state_type& st,
                        std::span<std::byte> ws, const char* who) {
  check_world(comm, plan.ranks(), who);
  check_workspace(ws, plan.workspace_bytes(), who);
  check_count(st.worker.size(), static_cast<std::uint64_t>(plan.ranks()), who,
              "state (worker states)");
}

} // namespace detail

/// @brief First half of the sharded path (the FSDP / ZeRO gradient path): returns in `shard`
/// the mean (or sum) over ranks of the decoded chunk this rank owns, added in rank order.
/// Every rank encodes chunk j with `state.worker[j]` (first EF point).
/// Fixed-length worker payloads go in one all-to-all of slots. Variable-length ones take two
/// calls: an all-gather of every rank's N payload lengths (so that every rank knows the longest
/// and pads to the same block), then the all-to-all of blocks as long as the longest; each is
/// decoded at the length its sender reported.
/// @param in the full tensor, plan.size() elements
/// @param shard plan.shard_size(comm.rank()) elements
/// @throws commpress::error on size mismatches, a bad workspace or pipeline errors; corrupt
/// when a rank reports a payload length outside [64, plan.worker_slot_bytes()]
template <communicator Comm, host_policy Policy, class Worker, class Server>
requires(!uses_device_buffers_v<Comm>) collective_result
    reduce_scatter_compressed(Comm& comm, const Policy& policy,
                              const sharded_plan<Worker, Server>& plan,
                              typename sharded_plan<Worker, Server>::state_type& state,
                              const context& ctx, std::span<const float> in, std::span<float> shard,
                              std::span<std::byte> workspace) {
  constexpr const char* who = "reduce_scatter_compressed";
  detail::check_sharded_call(comm, plan, state, workspace, who);
  const int me = static_cast<int>(comm.rank());
  const chunk_layout& lay = plan.layout();
  detail::check_count(in.size(), lay.n, who, "input");
  detail::check_count(shard.size(), lay.length(me), who, "shard");
  const auto r = plan.carve(workspace);
  const auto slot = static_cast<std::size_t>(plan.worker_slot_bytes());
  const auto ranks = static_cast<std::size_t>(plan.ranks());
  const bool variable = plan.worker_variable();

  collective_result res;
  for (std::size_t j = 0; j < ranks; ++j) {
    const std::span<std::byte> dst = r.send.subspan(j * slot, slot);
    const int jj = static_cast<int>(j);
    const step_result s = encode(policy, plan.worker_pipeline(), state.worker[j], ctx,
                                 in.subspan(lay.offset(jj), lay.length(jj)), dst, r.pipe_ws);
    // Short and empty chunks have smaller payloads: zero the slot's tail (defined wire bytes).
    std::fill(dst.begin() + static_cast<std::ptrdiff_t>(s.bytes), dst.end(), std::byte{0});
    if (variable)
      detail::store_length(r.my_lengths, j, s.bytes);
    res.payload_bytes += s.bytes;
    res.nonfinite += s.nonfinite;
    res.held += s.held;
  }
  // The block each rank sends each peer: the slot, or the longest payload of this call.
  std::size_t block = slot;
  std::uint64_t wire = 0;
  if (variable) {
    block = static_cast<std::size_t>(detail::exchange_lengths(
        comm, std::span<const std::byte>(r.my_lengths), r.lengths, slot, who));
    wire += (ranks - 1) * ranks * payload_length_bytes;
    // Payload j moves from slot j to block j, front to back: block <= slot, so no payload lands
    // on one not yet moved, and the bytes past a payload within its block are its zeroed tail.
    for (std::size_t j = 1; j < ranks; ++j)
      std::memmove(r.send.data() + j * block, r.send.data() + j * slot, block);
  }
  comm.all_to_all(std::span<const std::byte>(r.send.first(ranks * block)),
                  r.recv.first(ranks * block));
  wire += (ranks - 1) * block;

  std::fill(shard.begin(), shard.end(), 0.0f);
  const float w = detail::rank_weight(plan.options().scale, plan.ranks());
  for (std::size_t k = 0; k < ranks; ++k) {
    // Rank k's payload for this rank's chunk is the me-th of its N lengths.
    const std::size_t len = variable ? static_cast<std::size_t>(detail::load_length(
                                           r.lengths, k * ranks + static_cast<std::size_t>(me)))
                                     : block;
    decode_accumulate(policy, plan.worker_pipeline(),
                      std::span<const std::byte>(r.recv.subspan(k * block, len)), shard, w);
  }
  res.wire_bytes = static_cast<std::size_t>(wire);
  return res;
}

/// @brief Second half of the sharded path: this rank encodes its `shard` with the server
/// pipeline and `state.server` (second EF point), the payloads are all-gathered and every
/// rank decodes chunk j of `out` from owner j's payload. Every rank ends with the same bits.
/// Fixed-length server payloads are all-gathered in one call; variable-length ones after an
/// all-gather of their lengths, in blocks as long as the longest (as all_gather_compressed).
/// @param shard plan.shard_size(comm.rank()) elements (reduce_scatter_compressed's output)
/// @param out the full tensor, plan.size() elements; must not overlap `shard`
/// @throws commpress::error on size mismatches, a bad workspace or pipeline errors; corrupt
/// when a rank reports a payload length outside [64, plan.server_slot_bytes()]
template <communicator Comm, host_policy Policy, class Worker, class Server>
requires(!uses_device_buffers_v<Comm>) collective_result
    all_gather_shard_compressed(Comm& comm, const Policy& policy,
                                const sharded_plan<Worker, Server>& plan,
                                typename sharded_plan<Worker, Server>::state_type& state,
                                const context& ctx, std::span<const float> shard,
                                std::span<float> out, std::span<std::byte> workspace) {
  constexpr const char* who = "all_gather_shard_compressed";
  detail::check_sharded_call(comm, plan, state, workspace, who);
  const int me = static_cast<int>(comm.rank());
  const chunk_layout& lay = plan.layout();
  detail::check_count(shard.size(), lay.length(me), who, "shard");
  detail::check_count(out.size(), lay.n, who, "output");
  const auto r = plan.carve(workspace);
  const auto ranks = static_cast<std::size_t>(plan.ranks());
  const bool variable = plan.server_variable();

  const step_result s =
      encode(policy, plan.server_pipeline(), state.server, ctx, shard, r.server_payload, r.pipe_ws);
  const std::span<std::byte> my_length = r.my_lengths.first(variable ? payload_length_bytes : 0);
  const detail::gathered_payloads g =
      detail::gather_payloads(comm, r.server_payload, s.bytes, r.gathered, my_length,
                              r.lengths.first(my_length.size() * ranks), who);

  no_state receiver; // collective_pipeline: the receiver keeps nothing
  for (std::size_t j = 0; j < ranks; ++j) {
    const int jj = static_cast<int>(j);
    decode(policy, plan.server_pipeline(), receiver, g.payload(j),
           out.subspan(lay.offset(jj), lay.length(jj)));
  }
  return {s.bytes, static_cast<std::size_t>(g.wire_bytes), s.nonfinite, s.held};
}

/// @brief The two-EF-point compressed all-reduce: reduce_scatter_compressed into the
/// workspace's shard, then all_gather_shard_compressed into `out` (which may alias `in`).
/// With identity at both points the output is the exact rank-ordered mean; in general
/// sum_t out_t = sum_t mean_i g_i,t - (mean_i e_w,i,T + e_s,T) chunk by chunk (E8).
template <communicator Comm, host_policy Policy, class Worker, class Server>
requires(!uses_device_buffers_v<Comm>) collective_result
    sharded_all_reduce_compressed(Comm& comm, const Policy& policy,
                                  const sharded_plan<Worker, Server>& plan,
                                  typename sharded_plan<Worker, Server>::state_type& state,
                                  const context& ctx, std::span<const float> in,
                                  std::span<float> out, std::span<std::byte> workspace) {
  detail::check_workspace(workspace, plan.workspace_bytes(), "sharded_all_reduce_compressed");
  const std::span<float> shard =
      plan.carve(workspace).shard.first(plan.shard_size(static_cast<int>(comm.rank())));
  const collective_result a =
      reduce_scatter_compressed(comm, policy, plan, state, ctx, in, shard, workspace);
  const collective_result b = all_gather_shard_compressed(
      comm, policy, plan, state, ctx, std::span<const float>(shard), out, workspace);
  return {a.payload_bytes + b.payload_bytes, a.wire_bytes + b.wire_bytes, a.nonfinite + b.nonfinite,
          a.held + b.held};
}

} // namespace commpress
