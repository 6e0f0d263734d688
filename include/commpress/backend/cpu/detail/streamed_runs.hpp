// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Runs of 64 decoded values written to a large output of float, half or bfloat16 elements with
/// non-temporal stores, wherever the output starts relative to a cache line. Non-temporal
/// stores pay only as whole aligned lines (a line left partly written goes to memory as partial
/// writes), so where the output starts `lead` bytes before a line (a plain `std::vector` of
/// 32 MiB or more from glibc starts 16 bytes past one), the line that straddles two runs is
/// joined in a small stage and goes out whole.

#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>

#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/prefetch.hpp"
#include "commpress/backend/cpu/detail/simd.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"

namespace commpress::cpu::detail {

/// Whether a decode of n elements into out streams its output: it is large enough
/// (streaming_store_min_bytes) and its elements lie on their own size, as the vector stores
/// need. Decided on the whole tensor, so every range of a cpu::par decode chooses alike.
template <element T> bool streams_output(const T* out, std::uint64_t n) {
  return sizeof(T) * n >= streaming_store_min_bytes &&
         reinterpret_cast<std::uintptr_t>(out) % sizeof(T) == 0;
}

/// Writes runs of 64 values at out + i with non-temporal stores, as elements of T (each
/// from_float<T>(value)), for runs whose i all lie a whole number of cache lines apart (so each
/// starts the same distance before a line). A run is 64 * sizeof(T) bytes: four lines of fp32,
/// two of a 16-bit type. On a line, a run goes out as its lines. Off a line, it goes out as the
/// lines that end `lead` bytes into it and every 64 bytes later; the first joins the previous
/// run's last 64 - lead bytes, kept in a stage, to this run's first `lead`. Where a run does
/// not continue the previous one, the previous one's last 64 - lead bytes and this one's first
/// `lead` are plain stores, so only the runs' elements are written.
/// finish() writes the last run's tail and fences.
template <element T> class streamed_runs {
public:
  static constexpr unsigned line = 64;            // bytes per cache line
  static constexpr unsigned run = 64 * sizeof(T); // bytes per run of 64 elements
  static_assert(line % (4 * simd::lanes) == 0, "commpress: a cache line holds whole vectors");

  /// The runs start a whole number of cache lines from out + first.
  streamed_runs(T* out, std::uint64_t first)
      : out_(reinterpret_cast<unsigned char*>(out)),
        lead_(static_cast<unsigned>((line - reinterpret_cast<std::uintptr_t>(out + first) % line) %
                                    line)) {}
  streamed_runs(const streamed_runs&) = delete;
  streamed_runs& operator=(const streamed_runs&) = delete;

  /// Whether the runs start on a cache line (no stage).
  [[nodiscard]] bool on_line() const { return lead_ == 0; }

  /// values[0, 64) at out + i.
  COMMPRESS_FORCEINLINE void put_64(std::uint64_t i, const float* values) {
    if constexpr (std::same_as<T, float>) {
      put_run(i, reinterpret_cast<const unsigned char*>(values));
    } else {
      alignas(64) T elements[64];
      store_elements_64(elements, values);
      put_run(i, reinterpret_cast<const unsigned char*>(elements));
    }
  }

  /// The last run's tail, then a store fence: the runs are visible to other threads after it.
  void finish() {
    write_staged_tail();
    simd::store_fence();
  }

private:
  static constexpr std::uint64_t none = std::numeric_limits<std::uint64_t>::max();

  /// The 64 bytes at src (any alignment) to the cache line at dst, with non-temporal stores.
  static COMMPRESS_FORCEINLINE void stream_line(unsigned char* dst, const unsigned char* src) {
    for (unsigned q = 0; q < line / (4 * simd::lanes); ++q)
      simd::stream(reinterpret_cast<float*>(dst) + q * simd::lanes,
                   simd::from_bits(simd::load_u32(src + 4 * q * simd::lanes)));
  }

  /// The run's bytes src[0, run) at element i.
  COMMPRESS_FORCEINLINE void put_run(std::uint64_t i, const unsigned char* src) {
    unsigned char* const out = out_ + i * sizeof(T);
    const unsigned lead = lead_;
    if (lead == 0) {
      for (unsigned k = 0; k < run; k += line)
        stream_line(out + k, src + k);
      return;
    }
    // The lines start at out + lead - 64 + 64 k. Line 0 holds the previous run's last
    // 64 - lead bytes (stage_[lead, 64)) and this run's first lead; the others lie in src.
    if (staged_end_ == i) {
      std::memcpy(stage_ + line, src, line);
      stream_line(out + lead - line, stage_ + lead);
    } else {
      write_staged_tail();
      std::memcpy(out, src, lead);
    }
    for (unsigned k = 0; k + line < run; k += line) // the run's other lines, a fixed count
      stream_line(out + lead + k, src + lead + k);
    std::memcpy(stage_, src + run - line, line);
    staged_end_ = i + 64;
  }

  void write_staged_tail() {
    if (staged_end_ != none)
      std::memcpy(out_ + staged_end_ * sizeof(T) - line + lead_, stage_ + lead_, line - lead_);
    staged_end_ = none;
  }

  unsigned char* out_;
  unsigned lead_;                   // bytes from out + first to the next cache line, 0 to 63
  std::uint64_t staged_end_ = none; // one past the last run staged, in elements
  alignas(64) unsigned char stage_[2 * line]; // the last run's last line, then this run's first
};

} // namespace commpress::cpu::detail
