// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The CPU execution policies.

namespace commpress::cpu {

/// @brief Sequential CPU execution on the calling thread; the reference every backend matches.
struct seq_t {
  static constexpr bool host_memory = true;
};

/// @brief Tag object: `commpress::encode(commpress::cpu::seq, codec, ctx, in, out)`.
inline constexpr seq_t seq{};

} // namespace commpress::cpu
