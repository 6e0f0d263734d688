// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `all_reduce_compressed`: the all-reduce of a sum-compatible codec's value array
/// (docs/methods.md 9.2). identity is a plain float all-reduce; random_k with a shared
/// (seed, tensor_id, step) all-reduces its k kept values and decodes the sum once.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "commpress/collective/layout.hpp"

namespace commpress {

/// @brief Options of `all_reduce_compressed`.
struct all_reduce_options {
  scaling scale = scaling::mean; ///< mean: the decoded sum times 1/N (one rounding)
  /// Sum in rank order, x_0 + x_1 + ... + x_{N-1}, through all_gather rounds of at most
  /// `ordered_chunk` values per rank: bitwise reproducible whatever the transport, at N - 1
  /// times the bytes of a ring all-reduce. Off: the transport's own all-reduce (MPI_Allreduce),
  /// whose order MPI does not fix.
  bool rank_ordered = false;
  std::uint64_t ordered_chunk = std::uint64_t{1} << 18; ///< values per rank per gather round
  /// All-gather every rank's (seed, step, tensor_id) first and refuse to sum values drawn from
  /// different random streams (random_k indices would not match): one 24-byte all-gather.
  bool check_stream = true;
};

namespace detail {

/// How the body of a sum-compatible codec exposes its value array.
template <class Codec> struct sum_view;

template <> struct sum_view<identity> {
  static std::uint64_t values(const identity&, std::uint64_t n) { return n; }
};

template <> struct sum_view<random_k> {
  static std::uint64_t values(const random_k& c, std::uint64_t n) { return c.kept(n); }
  /// The codec that carries the summed values: the same selection with fp32 values.
  static random_k f32(random_k c) {
    c.values = dtype::f32;
    c.value_quantizer = quantize{.bits = 0};
    return c;
  }
  /// Reads the k wire values of a body as floats (before the unbiased scaling). Quantized
  /// values are decoded: their bodies carry per-rank scales and do not add as sent.
  static void read(const random_k& c, const std::byte* body, std::span<float> vals) {
    const auto* p = reinterpret_cast<const unsigned char*>(body);
    if (c.quantized()) {
      cpu::detail::decode_values(c.value_quantizer, vals.size(), p, 0, vals.size(), vals.data());
      return;
    }
    const std::uint64_t vb = c.value_bytes();
    for (std::size_t j = 0; j < vals.size(); ++j) {
      const std::uint32_t code = vb == 4 ? format::detail::load_le<std::uint32_t>(p + j * vb)
                                         : format::detail::load_le<std::uint16_t>(p + j * vb);
      vals[j] = c.decode_value(code);
    }
  }
};

/// Sums `x` over ranks in rank order with all_gather rounds through `scratch` (N * chunk
/// floats), like all_reduce_sum_ordered but without allocating.
template <class Comm>
void ordered_sum(Comm& comm, std::span<float> x, std::span<float> scratch, std::uint64_t chunk) {
  const int ranks = static_cast<int>(comm.size());
  if (ranks == 1 || x.empty())
    return;
  for (std::size_t off = 0; off < x.size(); off += chunk) {
    const std::size_t m = std::min<std::size_t>(chunk, x.size() - off);
    const std::span<float> part = x.subspan(off, m);
    const std::span<float> all = scratch.first(m * static_cast<std::size_t>(ranks));
    comm.all_gather(std::as_bytes(part), std::as_writable_bytes(all));
    sum_in_rank_order(all.data(), m, ranks, part.data());
  }
}

/// All-gathers (seed, step, tensor_id) and throws on every rank if any rank differs.
template <class Comm>
void check_same_stream(Comm& comm, const context& ctx, std::span<std::byte> scratch,
                       const char* who) {
  const std::uint64_t mine[3] = {ctx.seed, ctx.step, ctx.tensor_id};
  const auto mine_bytes = std::as_bytes(std::span<const std::uint64_t, 3>(mine));
  comm.all_gather(mine_bytes, scratch);
  for (int r = 0; r < static_cast<int>(comm.size()); ++r) {
    COMMPRESS_EXPECTS(std::memcmp(scratch.data() + static_cast<std::size_t>(r) * sizeof(mine), mine,
                                  sizeof(mine)) == 0,
                      errc::stream_mismatch, "collective",
                      std::string(who) + ": rank " + std::to_string(r) +
                          " encodes with another (seed, step, tensor_id) than rank " +
                          std::to_string(comm.rank()) +
                          ": sum-compatible codecs need the same random stream on every rank");
  }
}

} // namespace detail

/// @brief Sizes and buffers of `all_reduce_compressed` for one tensor size and world size.
///
/// The plan is a configuration value; the caller owns the feedback state (`make_state`) and
/// one workspace of `workspace_bytes()` bytes, so a call allocates nothing.
template <collective_pipeline Pipeline>
requires sum_compatible_v<typename Pipeline::codec_type>
class all_reduce_plan {
public:
  using pipeline_type = Pipeline;
  using codec_type = typename Pipeline::codec_type;
  using state_type = collective_state_t<Pipeline>;

  /// @throws commpress::error when the pipeline cannot run on n elements or ranks < 1
  all_reduce_plan(const Pipeline& pipe, std::uint64_t n, int ranks, all_reduce_options opt = {})
      : pipe_(pipe), n_(n), ranks_(ranks), opt_(opt) {
    COMMPRESS_EXPECTS(ranks >= 1, errc::invalid_argument, "collective", "ranks must be >= 1");
    COMMPRESS_EXPECTS(!opt.rank_ordered || opt.ordered_chunk > 0, errc::invalid_argument,
                      "collective", "all_reduce: ordered_chunk must be > 0");
    detail::check_pipeline(pipe, n, "all_reduce");
  }

  [[nodiscard]] const Pipeline& pipeline() const noexcept { return pipe_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return n_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] const all_reduce_options& options() const noexcept { return opt_; }
  /// @brief Floats each rank contributes to the all-reduce (n for identity, k for random_k).
  [[nodiscard]] std::uint64_t values() const {
    return detail::sum_view<codec_type>::values(pipe_.codec, n_);
  }
  /// @brief Bytes of this rank's encoded payload (before the values are extracted).
  [[nodiscard]] std::uint64_t payload_bytes() const { return pipe_.max_payload_bytes(n_); }
  /// @brief Bytes each rank sends: a ring all-reduce of the values, 2 (N-1)/N * 4k (rank
  /// ordered: an all-gather, (N-1) * 4k), plus the 24-byte stream check.
  [[nodiscard]] std::uint64_t wire_bytes() const {
    const auto peers = static_cast<std::uint64_t>(ranks_ - 1);
    const std::uint64_t bytes = 4 * values();
    const std::uint64_t sum =
        opt_.rank_ordered ? peers * bytes : 2 * peers * bytes / static_cast<std::uint64_t>(ranks_);
    return sum + (opt_.check_stream ? peers * 24 : 0);
  }
  /// @brief A fresh feedback state for this rank.
  [[nodiscard]] state_type make_state() const { return pipe_.make_state(n_); }
  /// @brief Bytes of the workspace every call needs.
  [[nodiscard]] std::uint64_t workspace_bytes() const { return carve({}).used; }

  /// The workspace regions of one call (public for all_reduce_compressed).
  struct regions {
    std::span<std::byte> payload, pipe_ws, sum_payload, stream;
    std::span<float> vals, ordered;
    std::uint64_t used = 0;
  };
  [[nodiscard]] regions carve(std::span<std::byte> ws) const {
    detail::ws_carver c(ws);
    regions r;
    r.payload = c.take(payload_bytes());
    r.pipe_ws = c.take(pipe_.workspace_bytes(n_));
    if constexpr (!std::same_as<codec_type, identity>) {
      // identity sums straight in `out`; random_k needs its k values and an fp32 payload.
      r.vals = c.take_floats(values());
      r.sum_payload = c.take(max_payload_bytes(detail::sum_view<codec_type>::f32(pipe_.codec), n_));
    }
    if (opt_.rank_ordered)
      r.ordered = c.take_floats(static_cast<std::uint64_t>(ranks_) *
                                std::min(opt_.ordered_chunk, std::max<std::uint64_t>(values(), 1)));
    if (opt_.check_stream)
      r.stream = c.take(24 * static_cast<std::uint64_t>(ranks_));
    r.used = c.used();
    return r;
  }

private:
  Pipeline pipe_;
  std::uint64_t n_;
  int ranks_;
  all_reduce_options opt_;
};

/// @brief Compressed all-reduce of a sum-compatible codec: encode through the pipeline (its
/// error feedback included), all-reduce the value array as floats, decode the sum once and
/// scale by 1/N (mean) or 1 (sum). Every rank calls it with the same plan and, for random_k,
/// the same context.
///
/// With identity and scaling::sum the result is the transport's all-reduce of `in`, bit for
/// bit (`rank_ordered`: all_reduce_sum_ordered's bits). `out` may alias `in`.
/// @param state this rank's feedback state (plan.make_state())
/// @param workspace at least plan.workspace_bytes() bytes, 4-byte aligned
/// @throws commpress::error on size mismatches, a bad workspace, mismatched random streams
///         (check_stream) or pipeline errors
template <communicator Comm, host_policy Policy, class Pipeline>
requires(!uses_device_buffers_v<Comm>) collective_result
    all_reduce_compressed(Comm& comm, const Policy& policy, const all_reduce_plan<Pipeline>& plan,
                          collective_state_t<Pipeline>& state, const context& ctx,
                          std::span<const float> in, std::span<float> out,
                          std::span<std::byte> workspace) {
  using codec_type = typename Pipeline::codec_type;
  constexpr const char* who = "all_reduce_compressed";
  detail::check_world(comm, plan.ranks(), who);
  detail::check_count(in.size(), plan.size(), who, "input");
  detail::check_count(out.size(), plan.size(), who, "output");
  detail::check_workspace(workspace, plan.workspace_bytes(), who);
  const auto r = plan.carve(workspace);
  if (plan.options().check_stream)
    detail::check_same_stream(comm, ctx, r.stream, who);

  const step_result sent = encode(policy, plan.pipeline(), state, ctx, in, r.payload, r.pipe_ws);
  const std::byte* body = r.payload.data() + format::header_bytes;
  const auto sum = [&](std::span<float> v) {
    if (plan.options().rank_ordered) {
      detail::ordered_sum(comm, v, r.ordered, plan.options().ordered_chunk);
    } else if (!v.empty()) {
      comm.all_reduce_sum(v);
    }
  };
  const float w = detail::rank_weight(plan.options().scale, plan.ranks());
  if constexpr (std::same_as<codec_type, identity>) {
    if (!out.empty())
      std::memcpy(out.data(), body, out.size_bytes());
    sum(out);
  } else {
    const codec_type& c = plan.pipeline().codec;
    detail::sum_view<codec_type>::read(c, body, r.vals);
    sum(r.vals);
    // The summed values as an fp32 payload of the same selection, decoded by the codec itself
    // so that the indices come from the one place that defines them.
    const codec_type c32 = detail::sum_view<codec_type>::f32(c);
    payload_header h;
    h.codec = codec_type::id;
    h.element = dtype::f32;
    h.count = plan.size();
    h.body_bytes = c32.body_bytes(plan.size());
    h.seed = ctx.seed;
    h.step = ctx.step;
    h.tensor_id = ctx.tensor_id;
    h.params = c32.params();
    format::write_header(h, r.sum_payload.data());
    if (!r.vals.empty())
      std::memcpy(r.sum_payload.data() + format::header_bytes, r.vals.data(), r.vals.size_bytes());
    format::seal(r.sum_payload, static_cast<std::size_t>(h.body_bytes));
    commpress::decode(policy, c32, std::span<const std::byte>(r.sum_payload), out);
  }
  detail::scale_in_place(out, w);
  return {sent.bytes, static_cast<std::size_t>(plan.wire_bytes()), sent.nonfinite, sent.held};
}

} // namespace commpress
