// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// PowerSGD's per-rank state (collective/powersgd.hpp): the error and the warm-start matrix Q,
/// checkpointed as a state blob. Apart from the products, so that it needs no Eigen.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "commpress/core/error.hpp"
#include "commpress/core/state_blob.hpp"

namespace commpress {

/// @brief One rank's PowerSGD state for one tensor: the error e (rows x columns) and the matrix
/// Q (columns x r) the next step starts from. Both are checkpointed, so a restored run continues
/// its warm start.
class powersgd_state {
public:
  static constexpr std::uint32_t layout_version = 1;

  powersgd_state() = default;
  powersgd_state(std::uint64_t rows, std::uint64_t columns, std::uint64_t rank)
      : rows_(rows), columns_(columns), e_(rows * columns, 0.0f), q_(columns * rank, 0.0f) {}

  [[nodiscard]] std::uint64_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::uint64_t columns() const noexcept { return columns_; }
  [[nodiscard]] std::uint64_t rank() const noexcept {
    return columns_ == 0 ? 0 : q_.size() / columns_;
  }
  /// The error e, in gradient units (what was computed but not yet sent).
  [[nodiscard]] std::span<const float> residual() const noexcept { return e_; }
  [[nodiscard]] std::span<float> residual() noexcept { return e_; }
  /// The matrix Q (columns x r, row-major) of the last step; meaningful once has_q().
  [[nodiscard]] std::span<const float> q() const noexcept { return q_; }
  [[nodiscard]] std::span<float> q() noexcept { return q_; }
  /// Whether Q holds a step's result (else the next step draws a fresh one).
  [[nodiscard]] bool has_q() const noexcept { return has_q_; }
  void set_has_q(bool v) noexcept { has_q_ = v; }

  [[nodiscard]] std::vector<std::byte> save(std::uint32_t tensor_id) const {
    blob_writer w(state_kind::powersgd, layout_version, tensor_id);
    w.size(rows_).size(columns_).size(rank());
    w.put(std::uint8_t{has_q_ ? std::uint8_t{1} : std::uint8_t{0}})
        .put(std::span<const float>(e_))
        .put(std::span<const float>(q_));
    return w.finish();
  }
  /// @throws commpress::error for a blob of another kind, version, tensor id or shape, or a bad
  ///         checksum; the state is unchanged then.
  void load(std::span<const std::byte> blob, std::uint32_t tensor_id) {
    blob_reader r(blob, state_kind::powersgd, layout_version, tensor_id);
    r.expect_sizes({rows_, columns_, rank()});
    const auto flag = r.get<std::uint8_t>();
    COMMPRESS_EXPECTS(flag <= 1, errc::corrupt, "state blob", "powersgd: bad has_q flag");
    std::vector<float> e(e_.size()), q(q_.size());
    r.get(std::span<float>(e));
    r.get(std::span<float>(q));
    r.finish();
    e_.swap(e);
    q_.swap(q);
    has_q_ = flag == 1;
  }

  friend bool operator==(const powersgd_state&, const powersgd_state&) = default;

private:
  std::uint64_t rows_ = 0;
  std::uint64_t columns_ = 0;
  std::vector<float> e_;
  std::vector<float> q_;
  bool has_q_ = false;
};

} // namespace commpress
