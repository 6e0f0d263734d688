// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The CPU results the CUDA parity tests compare against, computed in a host-compiled .cpp:
/// g++ builds the CPU backend (as users do), and nvcc does not have to compile it (nvcc 13.0
/// aborts with an internal error on backend/cpu/sign.hpp; see docs/cuda.md).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "commpress/compress/cast.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/compress/random_k.hpp"
#include "commpress/compress/sign.hpp"
#include "commpress/compress/top_k.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/feedback/storage.hpp"

namespace commpress::test {

/// Everything the CPU backend produces for one input.
template <class T> struct cpu_reference_result {
  std::vector<std::byte> payload;   ///< encode(cpu::seq, c, ctx, x)
  std::size_t nonfinite = 0;        ///< encode's non-finite count
  std::vector<T> decoded;           ///< decode(payload) as T
  std::vector<float> accumulated;   ///< acc0 + weight * decode(payload)
  std::vector<float> roundtripped;  ///< roundtrip of x widened to float
  std::vector<std::byte> corrupted; ///< payload with its last byte flipped
  errc corrupted_error = errc::ok;  ///< what decoding `corrupted` throws
};

/// A run of error-feedback steps on the CPU (feedback/ef.hpp, feedback/ef21.hpp).
struct feedback_reference {
  std::vector<std::vector<std::byte>> payloads; ///< one per step
  std::vector<float> sender;                    ///< EF residual / EF21 sender mirror at the end
  std::vector<float> receiver;                  ///< EF21 receiver mirror at the end
  std::vector<float> output;                    ///< the EF21 receiver's last output
  std::size_t nonfinite = 0;                    ///< summed over the steps
  std::size_t held = 0;                         ///< summed over the sender steps
};

/// EF (ef21 == false) or EF21 sender (and receiver) steps over `inputs`, step t with
/// context{seed 7, step t, tensor 1, policy}.
template <class C>
feedback_reference feedback_steps(const C& c, bool ef21,
                                  const std::vector<std::vector<float>>& inputs,
                                  nonfinite_policy policy);

/// LoCo steps (feedback/loco.hpp) with error storage S; `sender` is the final error, read back
/// as floats.
template <class S, class C>
feedback_reference loco_steps(const C& c, float beta, std::uint64_t reset_every,
                              const std::vector<std::vector<float>>& inputs,
                              nonfinite_policy policy);

/// A run of AQ-SGD steps on the CPU (feedback/aq_sgd.hpp): sender encode then receiver decode.
struct aq_sgd_reference {
  std::vector<std::vector<std::byte>> payloads; ///< one per step, exactly the bytes written
  std::vector<std::vector<float>> outputs;      ///< the receiver's output per step
  std::vector<float> sender;                    ///< the sender's cache at the end, every sample
  std::vector<float> receiver;                  ///< the receiver's cache at the end
  std::vector<float> sender_scales;             ///< store_int scales of the sender's cache
  std::vector<float> receiver_scales;           ///< store_int scales of the receiver's cache
  std::size_t nonfinite = 0;                    ///< summed over the sender steps
  std::size_t sender_held = 0;                  ///< summed over the sender steps
  std::size_t receiver_held = 0;                ///< summed over the receiver steps
};

/// AQ-SGD steps with cache storage S: step t sends inputs[t] (rows of ids[t]) with
/// context{seed 7, step t, tensor 1, policy}.
template <class S, class C>
aq_sgd_reference
aq_sgd_steps(const C& c, std::uint64_t samples, std::uint64_t sample_size,
             std::uint64_t warmup_steps, const std::vector<std::vector<std::uint64_t>>& ids,
             const std::vector<std::vector<float>>& inputs, nonfinite_policy policy);

/// Runs every CPU entry point of codec c on x.
template <class C, class T>
cpu_reference_result<T> cpu_reference(const C& c, const context& ctx, const std::vector<T>& x,
                                      const std::vector<float>& acc0, float weight);

#define COMMPRESS_CPU_REFERENCE(C, T)                                                              \
  extern template cpu_reference_result<T> cpu_reference<C, T>(                                     \
      const C&, const context&, const std::vector<T>&, const std::vector<float>&, float);
#define COMMPRESS_CPU_REFERENCE_ALL(C)                                                             \
  COMMPRESS_CPU_REFERENCE(C, float)                                                                \
  COMMPRESS_CPU_REFERENCE(C, half)                                                                 \
  COMMPRESS_CPU_REFERENCE(C, bfloat16)
COMMPRESS_CPU_REFERENCE_ALL(identity)
COMMPRESS_CPU_REFERENCE_ALL(cast)
COMMPRESS_CPU_REFERENCE_ALL(quantize)
COMMPRESS_CPU_REFERENCE_ALL(random_k)
COMMPRESS_CPU_REFERENCE_ALL(sign)
COMMPRESS_CPU_REFERENCE_ALL(top_k)
#define COMMPRESS_FEEDBACK_REFERENCE(C)                                                            \
  extern template feedback_reference feedback_steps<C>(                                            \
      const C&, bool, const std::vector<std::vector<float>>&, nonfinite_policy);
COMMPRESS_FEEDBACK_REFERENCE(identity)
COMMPRESS_FEEDBACK_REFERENCE(quantize)
COMMPRESS_FEEDBACK_REFERENCE(random_k)
COMMPRESS_FEEDBACK_REFERENCE(sign)
COMMPRESS_FEEDBACK_REFERENCE(top_k)
#define COMMPRESS_LOCO_REFERENCE(S, C)                                                             \
  extern template feedback_reference loco_steps<S, C>(                                             \
      const C&, float, std::uint64_t, const std::vector<std::vector<float>>&, nonfinite_policy);
#define COMMPRESS_LOCO_REFERENCE_ALL(C)                                                            \
  COMMPRESS_LOCO_REFERENCE(store_f32, C)                                                           \
  COMMPRESS_LOCO_REFERENCE(store_bf16, C)                                                          \
  COMMPRESS_LOCO_REFERENCE(store_int8, C)                                                          \
  COMMPRESS_LOCO_REFERENCE(store_int4, C)
COMMPRESS_LOCO_REFERENCE_ALL(quantize)
COMMPRESS_LOCO_REFERENCE_ALL(top_k)
#define COMMPRESS_AQ_SGD_REFERENCE(S, C)                                                           \
  extern template aq_sgd_reference aq_sgd_steps<S, C>(                                             \
      const C&, std::uint64_t, std::uint64_t, std::uint64_t,                                       \
      const std::vector<std::vector<std::uint64_t>>&, const std::vector<std::vector<float>>&,      \
      nonfinite_policy);
#define COMMPRESS_AQ_SGD_REFERENCE_ALL(C)                                                          \
  COMMPRESS_AQ_SGD_REFERENCE(store_f32, C)                                                         \
  COMMPRESS_AQ_SGD_REFERENCE(store_bf16, C)                                                        \
  COMMPRESS_AQ_SGD_REFERENCE(store_int8, C)                                                        \
  COMMPRESS_AQ_SGD_REFERENCE(store_int4, C)
COMMPRESS_AQ_SGD_REFERENCE_ALL(quantize)
COMMPRESS_AQ_SGD_REFERENCE_ALL(top_k)
#undef COMMPRESS_AQ_SGD_REFERENCE_ALL
#undef COMMPRESS_AQ_SGD_REFERENCE
#undef COMMPRESS_LOCO_REFERENCE_ALL
#undef COMMPRESS_LOCO_REFERENCE
#undef COMMPRESS_FEEDBACK_REFERENCE
#undef COMMPRESS_CPU_REFERENCE_ALL
#undef COMMPRESS_CPU_REFERENCE

} // namespace commpress::test
