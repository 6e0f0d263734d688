// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The checkpointable state objects the state-blob fuzzer and the reliability tests exercise:
/// every feedback state (EF residual, EF21 mirror, LoCo error and AQ-SGD cache in every storage
/// format, DGC's momenta), PowerSGD's state, the optimizer states, and channel ends (which nest
/// a state blob in their own). New states join at the end, so the seed corpus keeps its indices.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codec_table.hpp"
#include "commpress/collective/powersgd_state.hpp"
#include "commpress/feedback/aq_sgd.hpp"
#include "commpress/feedback/dgc.hpp"
#include "commpress/feedback/ef.hpp"
#include "commpress/feedback/ef21.hpp"
#include "commpress/feedback/loco.hpp"
#include "commpress/optim/adam.hpp"
#include "commpress/optim/sgd.hpp"
#include "commpress/pipeline/channel.hpp"

namespace commpress::reliability {

/// @brief The tensor id every state of the table is saved and loaded with.
inline constexpr std::uint32_t state_tensor_id = 4;

/// @brief Number of state objects `with_state` dispatches over.
inline constexpr std::size_t state_count = 15;

/// @brief A state's checkpoint blob (channel ends know their tensor id, other states are told).
template <class S> std::vector<std::byte> save_state(const S& s) {
  if constexpr (requires { s.save(); }) {
    return s.save();
  } else {
    return s.save(state_tensor_id);
  }
}

/// @brief Loads a checkpoint blob into a state.
template <class S> void load_state(S& s, std::span<const std::byte> blob) {
  if constexpr (requires { s.load(blob); }) {
    s.load(blob);
  } else {
    s.load(blob, state_tensor_id);
  }
}

/// @brief Calls f(state) with a freshly made state object number `index % state_count`.
template <class F> void with_state(std::size_t index, F&& f) {
  const context ctx{.seed = 2, .step = 5, .tensor_id = state_tensor_id};
  switch (index % state_count) {
  case 0: {
    ef_state s(8);
    for (std::size_t i = 0; i < 8; ++i)
      s.residual()[i] = 0.5f * static_cast<float>(i) - 1.0f;
    return f(s);
  }
  case 1: {
    ef21_state s(8);
    for (std::size_t i = 0; i < 8; ++i)
      s.mirror()[i] = static_cast<float>(i * i);
    return f(s);
  }
  case 2: {
    loco_state<store_f32> s(8);
    return f(s);
  }
  case 3: {
    loco_state<store_bf16> s(8);
    return f(s);
  }
  case 4: {
    loco_state<store_int<8, 4>> s(10); // a short last block
    return f(s);
  }
  case 5: {
    loco_state<store_int<4, 4>> s(10); // packed nibbles
    return f(s);
  }
  case 6: {
    aq_sgd_state<store_f32> s(3, 4);
    return f(s);
  }
  case 7: {
    aq_sgd_state<store_int<4, 2>> s(2, 6);
    return f(s);
  }
  case 8: {
    sgd_state s{.n = 8, .step = 3, .momentum = std::vector<float>(8, 0.25f)};
    return f(s);
  }
  case 9: {
    adam_state s{.n = 8,
                 .step = 7,
                 .exp_avg = std::vector<float>(8, -1.5f),
                 .exp_avg_sq = std::vector<float>(8, 4.0f)};
    return f(s);
  }
  case 10: {
    sender_end s(pipeline<ef, top_k>{.codec = top_k{.count = 2}}, 8, ctx);
    return f(s);
  }
  case 11: {
    receiver_end r(pipeline<ef21, quantize>{}, 8, ctx);
    return f(r);
  }
  case 12: {
    sender_end s(pipeline<loco<store_int8>, sign>{}, 8, ctx);
    return f(s);
  }
  case 13: {
    dgc_state s(8);
    for (std::size_t i = 0; i < 8; ++i) {
      s.momentum()[i] = 0.125f * static_cast<float>(i);
      s.velocity()[i] = -static_cast<float>(i);
    }
    return f(s);
  }
  default: {
    powersgd_state s(4, 3, 2);
    for (std::size_t i = 0; i < 12; ++i)
      s.residual()[i] = 0.25f * static_cast<float>(i) - 1.0f;
    return f(s);
  }
  }
}

} // namespace commpress::reliability
