// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The CPU execution policies.

#include <cstdint>

namespace commpress::cpu {

/// @brief Sequential CPU execution on the calling thread; the reference every backend matches.
struct seq_t {
  static constexpr bool host_memory = true;
};

/// @brief Tag object: `commpress::encode(commpress::cpu::seq, codec, ctx, in, out)`.
inline constexpr seq_t seq{};

/// @brief Multi-threaded CPU execution (OpenMP), byte-identical to seq_t for every codec and
/// every thread count. Its codec implementations live in backend/cpu/par.hpp.
///
/// A tensor is cut into ranges of `grain` elements (rounded up to a multiple of 64) or of the
/// whole groups that cover them, fixed by the tensor and the codec alone, and the ranges are
/// shared among the threads; a tensor of fewer than two ranges runs seq's code on the calling
/// thread. Without OpenMP (COMMPRESS_ENABLE_OPENMP=OFF or no OpenMP found) every range runs on
/// the calling thread, in order: the same bytes, one thread.
struct par_t {
  unsigned threads = 0;    ///< team size; 0: OpenMP's default (OMP_NUM_THREADS or the cores)
  std::uint64_t grain = 0; ///< elements per range; 0: 1 Mi (enough to amortize a fork/join)
  static constexpr bool host_memory = true;
};

/// @brief Tag object: `commpress::encode(commpress::cpu::par, codec, ctx, in, out)`, or
/// `commpress::cpu::par_t{.threads = 4}` for a fixed team size.
inline constexpr par_t par{};

} // namespace commpress::cpu
