// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The sender's state update from a fresh compression error, shared by error feedback, LoCo, the
/// CPU kernels that fuse it into the encode (feedback/fused_quantize.hpp) and the CUDA LoCo update.

#include "commpress/core/config.hpp"
#include "commpress/core/math.hpp"

namespace commpress::detail {

/// @brief e = keep * e + take * fresh (LoCo's moving average, docs/methods.md 7.1), where the
/// fresh error h - deQ(Q(h)) and the result are finite; otherwise e keeps its value.
///
/// keep == 0 is error feedback's e = fresh itself (not 0 * e + 1 * fresh), so that even the
/// sign of a zero matches EF and a non-finite old e cannot leak in.
struct error_update {
  float keep = 0.0f; ///< weight on the old error (LoCo's beta)
  float take = 1.0f; ///< weight on the fresh error (1 - beta, rounded once)

  /// Applies the rule to one element; true where it held e instead. Branch-free, so that a loop
  /// over a block vectorizes.
  COMMPRESS_HOST_DEVICE COMMPRESS_FORCEINLINE bool operator()(float fresh, float& e) const {
    const float v = keep == 0.0f ? fresh : add_rn(mul_rn(keep, e), mul_rn(take, fresh));
    const unsigned ok = (is_finite(fresh) ? 1u : 0u) & (is_finite(v) ? 1u : 0u);
    e = ok != 0 ? v : e;
    return ok == 0;
  }
};

} // namespace commpress::detail
