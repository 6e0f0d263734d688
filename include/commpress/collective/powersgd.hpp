// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// PowerSGD's exchange (Vogels et al. 2019, Algorithm 2; docs/methods.md 18): two all-reduces,
/// of P and then of Q, with the orthogonalisation between them, and error feedback.
///
/// Per step, on every rank, for a gradient g viewed as a rows x columns matrix:
///
///     M = g + e                                  (error feedback)
///     P = M Q                                    (Q: the last step's, or a fresh random one)
///     P <- sum over ranks of P                   (all-reduce 1: rows * r floats)
///     P^ = orthogonalize(P)
///     Q = M^T P^
///     Q <- sum over ranks of Q, times 1/N (mean) (all-reduce 2: columns * r floats)
///     out = P^ Q^T                               (the same on every rank)
///     e = M - out                                (each rank's own error)
///
/// Q is linear in M, so out = P^ P^T mean(M): the projection of the mean onto the subspace P^
/// spans, and a mean of rank at most r is reconstructed exactly (to rounding).
///
/// A host framework with its own communication layer drives one step as a `powersgd_round`:
/// project(), sum the span it returns across ranks, back_project(), sum that span, finish().
/// `all_reduce_powersgd` does the same with a communicator.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "commpress/backend/cpu/powersgd.hpp"
#include "commpress/collective/layout.hpp"
#include "commpress/collective/powersgd_state.hpp"
#include "commpress/compress/powersgd.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/math.hpp"

namespace commpress {

/// @brief PowerSGD on one rows x columns tensor over `ranks` ranks: sizes, the state, the
/// workspace. A configuration value; the caller owns the state and the workspace.
class powersgd_plan {
public:
  /// @throws commpress::error for an invalid configuration or ranks < 1
  powersgd_plan(const powersgd& c, std::uint64_t rows, std::uint64_t columns, int ranks,
                scaling scale = scaling::mean)
      : c_(c), rows_(rows), columns_(columns), ranks_(ranks), scale_(scale) {
    const status s = c.can_implement(rows, columns);
    COMMPRESS_EXPECTS(s, s.code, "collective", std::string("powersgd: ") + s.message);
    COMMPRESS_EXPECTS(ranks >= 1, errc::invalid_argument, "collective", "ranks must be >= 1");
  }

  [[nodiscard]] const powersgd& config() const noexcept { return c_; }
  [[nodiscard]] std::uint64_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::uint64_t columns() const noexcept { return columns_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return rows_ * columns_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] scaling scale() const noexcept { return scale_; }
  /// The rank r actually used.
  [[nodiscard]] std::uint64_t rank() const noexcept { return c_.rank_for(rows_, columns_); }
  /// Whether the step `step` sends the plain fp32 mean (before start_iter).
  [[nodiscard]] bool warming_up(std::uint64_t step) const noexcept { return step < c_.start_iter; }
  /// Floats one rank puts into the all-reduces of a step: (rows + columns) r, or the whole
  /// tensor while warming up.
  [[nodiscard]] std::uint64_t message_floats(std::uint64_t step) const noexcept {
    return warming_up(step) ? size() : c_.message_floats(rows_, columns_);
  }
  /// Bytes one rank sends in a step under ring all-reduces: 2 (N - 1) / N * 4 * message_floats.
  [[nodiscard]] std::uint64_t wire_bytes(std::uint64_t step) const noexcept {
    const auto n = static_cast<std::uint64_t>(ranks_);
    return 2 * (n - 1) * 4 * message_floats(step) / n;
  }
  [[nodiscard]] powersgd_state make_state() const { return {rows_, columns_, rank()}; }
  /// Bytes of the workspace a round needs: M (rows x columns floats), P (rows x r) and Q^T
  /// (r x columns).
  [[nodiscard]] std::uint64_t workspace_bytes() const { return carve({}).used; }

  struct regions {
    std::span<float> m, p, qt;
    std::uint64_t used = 0;
  };
  [[nodiscard]] regions carve(std::span<std::byte> ws) const {
    detail::ws_carver c(ws);
    regions r;
    r.m = c.take_floats(size());
    r.p = c.take_floats(rows_ * rank());
    r.qt = c.take_floats(columns_ * rank());
    r.used = c.used();
    return r;
  }

private:
  powersgd c_;
  std::uint64_t rows_, columns_;
  int ranks_;
  scaling scale_;
};

/// @brief One PowerSGD step on one rank, in the three phases around its two sums. Every rank
/// runs the phases in the same order with the same plan and context; the spans project() and
/// back_project() return are summed across ranks in place (a plain float all-reduce, sum)
/// before the next phase. While warming up (context step < start_iter) project() returns the
/// gradient itself, back_project() an empty span, and finish() writes the mean (or sum). The
/// passes over the rows x columns matrices run on cpu::par's OpenMP threads.
class powersgd_round {
public:
  /// @throws commpress::error on a size mismatch, a small or misaligned workspace, or (under
  ///         nonfinite_policy::fail) a NaN/Inf in `in`, before anything is written
  powersgd_round(const powersgd_plan& plan, powersgd_state& state, const context& ctx,
                 std::span<const float> in, std::span<std::byte> workspace)
      : plan_(plan), state_(state), ctx_(ctx), in_(in), ws_(plan.carve(workspace)) {
    constexpr const char* who = "powersgd";
    detail::check_count(in.size(), plan.size(), who, "input");
    detail::check_workspace(workspace, plan.workspace_bytes(), who);
    COMMPRESS_EXPECTS(state.rows() == plan.rows() && state.columns() == plan.columns() &&
                          state.rank() == plan.rank(),
                      errc::size_mismatch, "collective",
                      "powersgd: the state was made for another shape or rank");
    if (ctx.on_nonfinite == nonfinite_policy::fail) {
      for (float x : in)
        COMMPRESS_EXPECTS(detail::is_finite(x), errc::non_finite, "collective",
                          "powersgd: the input holds NaN or Inf");
    }
  }

  /// Phase 1: M = g + e (g alone while warming up) and P = M Q. Returns P (rows x r), or M while
  /// warming up, for the caller to sum across ranks in place.
  std::span<float> project() {
    const bool warm = plan_.warming_up(ctx_.step);
    nonfinite_ +=
        cpu::powersgd_kernels::form(cpu::par, in_.data(), warm ? nullptr : state_.residual().data(),
                                    ctx_.on_nonfinite, plan_.rows(), plan_.columns(), ws_.m.data());
    if (warm)
      return ws_.m;
    if (!plan_.config().warm_start || !state_.has_q())
      cpu::powersgd_kernels::initial_q(state_.q().data(), state_.q().size(), ctx_.key(), ctx_.step);
    cpu::powersgd_kernels::project(ws_.m.data(), plan_.rows(), plan_.columns(), state_.q().data(),
                                   plan_.rank(), ws_.p.data());
    return ws_.p;
  }

  /// Phase 2, after P was summed: P^ = orthogonalize(P), Q = M^T P^. Returns Q (columns x r, in
  /// the state) for the caller to sum across ranks in place; empty while warming up.
  std::span<float> back_project() {
    if (plan_.warming_up(ctx_.step))
      return {};
    cpu::powersgd_kernels::orthogonalize(ws_.p.data(), plan_.rows(), plan_.rank(),
                                         plan_.config().orthogonalization_epsilon);
    cpu::powersgd_kernels::back_project(cpu::par, ws_.m.data(), plan_.rows(), plan_.columns(),
                                        ws_.p.data(), plan_.rank(), ws_.qt.data());
    cpu::powersgd_kernels::transpose(ws_.qt.data(), plan_.rank(), plan_.columns(),
                                     state_.q().data());
    return state_.q();
  }

  /// Phase 3, after Q was summed: Q times 1/N (mean), out = P^ Q^T, e = M - out (an element
  /// whose new error would be NaN/Inf keeps its old one, counted in `held`). While warming up,
  /// out = the summed gradient times 1/N (mean) and e is untouched. `out` may alias the input.
  collective_result finish(std::span<float> out) {
    detail::check_count(out.size(), plan_.size(), "powersgd", "output");
    const float w = detail::rank_weight(plan_.scale(), plan_.ranks());
    collective_result result;
    result.wire_bytes = static_cast<std::size_t>(plan_.wire_bytes(ctx_.step));
    result.payload_bytes = static_cast<std::size_t>(4 * plan_.message_floats(ctx_.step));
    result.nonfinite = nonfinite_;
    if (plan_.warming_up(ctx_.step)) {
      for (std::uint64_t i = 0; i < plan_.size(); ++i)
        out[i] = detail::mul_rn(ws_.m[i], w);
      return result;
    }
    detail::scale_in_place(state_.q(), w);
    state_.set_has_q(true);
    cpu::powersgd_kernels::transpose(state_.q().data(), plan_.columns(), plan_.rank(),
                                     ws_.qt.data());
    result.held = cpu::powersgd_kernels::reconstruct_and_update(
        cpu::par, ws_.m.data(), plan_.rows(), plan_.columns(), ws_.p.data(), ws_.qt.data(),
        plan_.rank(), out.data(), state_.residual().data());
    return result;
  }

private:
  const powersgd_plan& plan_;
  powersgd_state& state_;
  context ctx_;
  std::span<const float> in_;
  powersgd_plan::regions ws_;
  std::size_t nonfinite_ = 0;
};

/// @brief One PowerSGD step through a communicator: project, all-reduce P, back-project,
/// all-reduce Q, finish. Every rank calls it with the same plan and context; `out` (the mean of
/// the ranks' gradients, rank r approximated, or their sum) is the same on every rank.
/// @param workspace at least plan.workspace_bytes() bytes, 4-byte aligned
template <communicator Comm>
requires(!uses_device_buffers_v<Comm>) collective_result
    all_reduce_powersgd(Comm& comm, const powersgd_plan& plan, powersgd_state& state,
                        const context& ctx, std::span<const float> in, std::span<float> out,
                        std::span<std::byte> workspace) {
  detail::check_world(comm, plan.ranks(), "all_reduce_powersgd");
  powersgd_round round(plan, state, ctx, in, workspace);
  comm.all_reduce_sum(round.project());
  const std::span<float> q = round.back_project();
  if (!q.empty())
    comm.all_reduce_sum(q);
  return round.finish(out);
}

} // namespace commpress
