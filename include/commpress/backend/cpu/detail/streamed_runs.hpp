// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Runs of 64 floats written to a large output with non-temporal stores, wherever the output
/// starts relative to a cache line. Non-temporal stores pay only as whole aligned lines (a line
/// left partly written goes to memory as partial writes), so where the output starts `lead`
/// floats before a line (a plain `std::vector` of 32 MiB or more from glibc starts 16 bytes past
/// one), the line that straddles two runs is joined in a small stage and goes out whole.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/config.hpp"

namespace commpress::cpu::detail {

/// Writes runs of 64 floats at out + i with non-temporal stores, for runs whose i all lie a
/// multiple of 16 apart (so each starts the same distance before a cache line). On a line, a
/// run is four lines. Off a line, a run goes out as the four lines that end `lead` floats into
/// it and 16, 32 and 48 floats later; the first joins the previous run's last 16 - lead floats,
/// kept in a stage, to this run's first `lead`. Where a run does not continue the previous one,
/// the previous one's last 16 - lead floats and this one's first `lead` are plain stores, so
/// only floats of the runs are written.
/// finish() writes the last run's tail and fences.
class streamed_runs {
public:
  static constexpr unsigned line = 16; // floats per cache line
  static_assert(line % simd::lanes == 0, "commpress: a cache line holds whole vectors");

  /// `out` aligned to a float; the runs start a multiple of 16 floats from out + first.
  streamed_runs(float* out, std::uint64_t first)
      : out_(out), lead_(static_cast<unsigned>(
                       (64 - reinterpret_cast<std::uintptr_t>(out + first) % 64) % 64 / 4)) {}
  streamed_runs(const streamed_runs&) = delete;
  streamed_runs& operator=(const streamed_runs&) = delete;

  /// Whether the runs start on a cache line (no stage).
  [[nodiscard]] bool on_line() const { return lead_ == 0; }

  /// values[0, 64) at out + i.
  COMMPRESS_FORCEINLINE void put_64(std::uint64_t i, const float* values) {
    float* const out = out_ + i;
    const unsigned lead = lead_;
    if (lead == 0) {
      for (unsigned q = 0; q < simd::vectors_per_64; ++q)
        simd::stream(out + q * simd::lanes, simd::load(values + q * simd::lanes));
      return;
    }
    // The lines start at out + lead - 16 + 16 k. Line 0 holds the previous run's last
    // 16 - lead values (stage_[lead, 16)) and this run's first lead; lines 1 to 3 lie in values.
    if (staged_end_ == i) {
      for (unsigned q = 0; q < line / simd::lanes; ++q)
        simd::store(stage_ + line + q * simd::lanes, simd::load(values + q * simd::lanes));
      for (unsigned q = 0; q < line / simd::lanes; ++q)
        simd::stream(out + lead - line + q * simd::lanes,
                     simd::load(stage_ + lead + q * simd::lanes));
    } else {
      write_staged_tail();
      std::copy_n(values, lead, out);
    }
    for (unsigned q = 0; q < 3 * line / simd::lanes; ++q)
      simd::stream(out + lead + q * simd::lanes, simd::load(values + lead + q * simd::lanes));
    for (unsigned q = 0; q < line / simd::lanes; ++q)
      simd::store(stage_ + q * simd::lanes, simd::load(values + 64 - line + q * simd::lanes));
    staged_end_ = i + 64;
  }

  /// The last run's tail, then a store fence: the runs are visible to other threads after it.
  void finish() {
    write_staged_tail();
    simd::store_fence();
  }

private:
  static constexpr std::uint64_t none = std::numeric_limits<std::uint64_t>::max();

  void write_staged_tail() {
    if (staged_end_ != none)
      std::copy_n(stage_ + lead_, line - lead_, out_ + staged_end_ - line + lead_);
    staged_end_ = none;
  }

  float* out_;
  unsigned lead_;                     // floats from out + first to the next cache line, 0 to 15
  std::uint64_t staged_end_ = none;   // one past the last run staged
  alignas(64) float stage_[2 * line]; // the last run's last 16 values, then this run's first 16
};

} // namespace commpress::cpu::detail
