// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `all_gather_compressed`: every rank encodes its tensor into a payload, the payloads are
/// all-gathered, and every rank decodes and accumulates them in rank order (docs/methods.md
/// 9.1): top_k, sign, quantize with per-rank scales, cast, or any codec. A payload of fixed
/// length fills its slot; one of variable length (qsgd's Elias coding) travels at the length its
/// encode wrote, after an all-gather of those lengths (docs/collectives.md).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "commpress/collective/layout.hpp"

namespace commpress {

/// @brief Options of `all_gather_compressed`.
struct all_gather_options {
  scaling scale = scaling::mean; ///< each payload is accumulated with weight 1/N or 1
};

/// @brief Sizes and buffers of `all_gather_compressed` for one tensor size and world size.
template <collective_pipeline Pipeline> class all_gather_plan {
public:
  using pipeline_type = Pipeline;
  using state_type = collective_state_t<Pipeline>;

  /// @throws commpress::error when the pipeline cannot run on n elements or ranks < 1
  all_gather_plan(const Pipeline& pipe, std::uint64_t n, int ranks, all_gather_options opt = {})
      : pipe_(pipe), n_(n), ranks_(ranks), opt_(opt) {
    COMMPRESS_EXPECTS(ranks >= 1, errc::invalid_argument, "collective", "ranks must be >= 1");
    detail::check_pipeline(pipe, n, "all_gather");
  }

  [[nodiscard]] const Pipeline& pipeline() const noexcept { return pipe_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return n_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] const all_gather_options& options() const noexcept { return opt_; }
  /// @brief Bytes of every rank's payload slot: the payload's length, fixed by n and the
  /// configuration, or its largest where the codec's body varies (variable_payloads).
  [[nodiscard]] std::uint64_t payload_bytes() const { return pipe_.max_payload_bytes(n_); }
  /// @brief Whether the payloads vary in length, so that a call exchanges their lengths first.
  [[nodiscard]] bool variable() const noexcept { return variable_payloads(pipe_); }
  /// @brief Bytes each rank sends: its payload to each of the N - 1 peers (a ring all-gather
  /// forwards N - 1 blocks of the same size). Exact for fixed-length payloads. For variable ones
  /// (variable()) the worst case, (N - 1) * (8 + payload_bytes()): a call sends its 8-byte length
  /// and a block as long as the longest payload of that call to each peer, which its
  /// collective_result::wire_bytes reports.
  [[nodiscard]] std::uint64_t wire_bytes() const {
    const std::uint64_t block = (variable() ? payload_length_bytes : 0) + payload_bytes();
    return static_cast<std::uint64_t>(ranks_ - 1) * block;
  }
  [[nodiscard]] state_type make_state() const { return pipe_.make_state(n_); }
  [[nodiscard]] std::uint64_t workspace_bytes() const { return carve({}).used; }

  /// The workspace regions of one call (the lengths only for variable-length payloads).
  struct regions {
    std::span<std::byte> mine, all, pipe_ws, my_length, lengths;
    std::uint64_t used = 0;
  };
  [[nodiscard]] regions carve(std::span<std::byte> ws) const {
    detail::ws_carver c(ws);
    regions r;
    r.mine = c.take(payload_bytes());
    r.all = c.take(payload_bytes() * static_cast<std::uint64_t>(ranks_));
    r.pipe_ws = c.take(pipe_.workspace_bytes(n_));
    if (variable()) {
      r.my_length = c.take(payload_length_bytes);
      r.lengths = c.take(payload_length_bytes * static_cast<std::uint64_t>(ranks_));
    }
    r.used = c.used();
    return r;
  }

private:
  Pipeline pipe_;
  std::uint64_t n_;
  int ranks_;
  all_gather_options opt_;
};

/// @brief Compressed all-gather aggregation: `out = 0; out += w * deQ(payload_r)` for
/// r = 0, 1, ..., N-1, with w = 1/N (mean) or 1 (sum). Every rank reads the same gathered
/// bytes in the same order, so every rank ends with the same bits. The support of a top_k
/// result is at most N * k (docs/methods.md 11.5, A3). `out` may alias `in`.
///
/// Fixed-length payloads are all-gathered in one call. Variable-length ones take two: an
/// all-gather of every rank's payload length (8 bytes), then of the payloads, each zero-padded
/// to the longest; each is decoded at the length its rank reported.
/// @param state this rank's feedback state (plan.make_state())
/// @param workspace at least plan.workspace_bytes() bytes, 4-byte aligned
/// @throws commpress::error on size mismatches, a bad workspace or pipeline errors; corrupt
/// when a rank reports a payload length outside [64, plan.payload_bytes()]
template <communicator Comm, host_policy Policy, class Pipeline>
requires(!uses_device_buffers_v<Comm>) collective_result
    all_gather_compressed(Comm& comm, const Policy& policy, const all_gather_plan<Pipeline>& plan,
                          collective_state_t<Pipeline>& state, const context& ctx,
                          std::span<const float> in, std::span<float> out,
                          std::span<std::byte> workspace) {
  constexpr const char* who = "all_gather_compressed";
  detail::check_world(comm, plan.ranks(), who);
  detail::check_count(in.size(), plan.size(), who, "input");
  detail::check_count(out.size(), plan.size(), who, "output");
  detail::check_workspace(workspace, plan.workspace_bytes(), who);
  const auto r = plan.carve(workspace);

  const step_result sent = encode(policy, plan.pipeline(), state, ctx, in, r.mine, r.pipe_ws);
  const detail::gathered_payloads g =
      detail::gather_payloads(comm, r.mine, sent.bytes, r.all, r.my_length, r.lengths, who);

  std::fill(out.begin(), out.end(), 0.0f);
  const float w = detail::rank_weight(plan.options().scale, plan.ranks());
  for (std::size_t k = 0; k < static_cast<std::size_t>(plan.ranks()); ++k)
    decode_accumulate(policy, plan.pipeline(), g.payload(k), out, w);
  return {sent.bytes, static_cast<std::size_t>(g.wire_bytes), sent.nonfinite, sent.held};
}

} // namespace commpress
