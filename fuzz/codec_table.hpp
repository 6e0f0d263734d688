// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The codec configurations the fuzzers and the reliability tests exercise: every codec, a few
/// configurations each, chosen to reach every code path of its body layout (list and bitmap
/// indices, per-row selection, narrow value dtypes, tensor/block/column groups, both ranges,
/// both roundings, both sign scales).

#include <cstddef>
#include <cstdint>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"

namespace commpress::reliability {

/// @brief Number of configurations `with_config` dispatches over.
inline constexpr std::size_t config_count = 19;

/// @brief Calls f(codec, stochastic) with configuration `index % config_count`; `stochastic` says
/// whether the payload depends on the context's step (random-k, stochastic rounding).
template <class F> decltype(auto) with_config(std::size_t index, F&& f) {
  switch (index % config_count) {
  case 0:
    return f(identity{}, false);
  case 1:
    return f(cast{.to = dtype::bf16}, false);
  case 2:
    return f(cast{.to = dtype::f16}, false);
  case 3:
    return f(top_k{.fraction = 0.25f}, false); // index list
  case 4:
    return f(top_k{.count = 3, .row_length = 8, .values = dtype::f16}, false);
  case 5:
    return f(top_k{.fraction = 0.9f, .values = dtype::bf16}, false); // bitmap
  case 6:
    return f(top_k{.fraction = 0.0f}, false); // keeps nothing
  case 7:
    return f(random_k{.count = 4}, true);
  case 8:
    return f(random_k{.fraction = 0.5f, .unbiased = true, .values = dtype::bf16}, true);
  case 9: // keeps every element: one-element strata, so the payload does not depend on the step
    return f(random_k{.fraction = 1.0f, .values = dtype::f16}, false);
  case 10:
    return f(sign{}, false);
  case 11:
    return f(sign{.granularity = sign_granularity::block, .block = 5, .scale = sign_scale::rms},
             false);
  case 12:
    return f(quantize{.bits = 4, .granularity = scale_granularity::block, .group = 8}, false);
  case 13:
    return f(quantize{.bits = 8,
                      .granularity = scale_granularity::tensor,
                      .group = 0,
                      .range = quant_range::asymmetric,
                      .round = rounding::stochastic},
             true);
  case 14:
    return f(quantize{.bits = 3,
                      .granularity = scale_granularity::column,
                      .group = 4,
                      .range = quant_range::asymmetric},
             false);
  case 15:
    return f(quantize{.bits = 1,
                      .granularity = scale_granularity::block,
                      .group = 16,
                      .range = quant_range::asymmetric},
             false);
  case 16:
    return f(quantize{.bits = 2,
                      .granularity = scale_granularity::block,
                      .group = 3,
                      .round = rounding::stochastic},
             true);
  case 17:
    return f(quantize{.bits = 5, .granularity = scale_granularity::column, .group = 2}, false);
  default:
    return f(top_k{.count = 2, .row_length = 1000}, false); // 2-byte list, rows of 1000
  }
}

} // namespace commpress::reliability
