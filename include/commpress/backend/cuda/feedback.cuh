// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Error-feedback steps on device memory: classic EF, EF21 (sender and receiver) and LoCo (with
/// fp32, bf16, int8 or int4 error storage), the same arithmetic as feedback/ef.hpp, ef21.hpp and
/// loco.hpp on the CPU, so payloads and states match
/// the CPU's bit for bit step after step (docs/methods.md 11.4, E9: CPU <-> GPU mirrors).
///
/// State lives in caller-owned device arrays (the residual e, the mirror A: n floats each,
/// zero-initialised by the caller). Each step is a few element-wise kernels around the codec's
/// own encode/decode: the update arithmetic is fused into single passes, the codec is not (its
/// kernels are shared with plain encode). As everywhere in the CUDA backend, calls only enqueue
/// work on the policy's stream; data-dependent outcomes go to the optional device_status:
/// `nonfinite` (input NaN/Inf, as step_result::nonfinite), `held` (state elements whose update
/// was non-finite and kept their previous value, as step_result::held), and errc::non_finite
/// under nonfinite_policy::fail (the state is then left untouched and the payload poisoned).

#include <cuda_runtime.h>

#include <concepts>
#include <cstdint>
#include <span>

#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/backend/cuda/status.cuh"
#include "commpress/core/context.hpp"
#include "commpress/core/error_update.hpp"
#include "commpress/core/math.hpp"
#include "commpress/feedback/loco.hpp"
#include "commpress/feedback/storage.hpp"

namespace commpress {
namespace cuda::detail {

/// t[i] = screen(in[i]) + sign * state[i] (EF: h = g + e; EF21: t = g - A), counting inputs.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    feedback_input_kernel(const T* in, const float* state, std::uint64_t n, bool subtract,
                          nonfinite_policy policy, float* t, control* own) {
  std::size_t bad = 0;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride()) {
    const float x = commpress::detail::screen(to_float(in[i]), policy, bad);
    t[i] =
        subtract ? commpress::detail::sub_rn(x, state[i]) : commpress::detail::add_rn(x, state[i]);
  }
  add_nonfinite(own, bad);
}

/// The state update after the codec: EF e = r where r = h - deQ is finite (replace), EF21
/// A = A + weight * d where finite (add). Skipped entirely when the call was refused (fail
/// policy with NaN/Inf inputs) or the payload failed validation (`codec->invalid`).
template <bool Replace>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    feedback_update_kernel(float* state, const float* t, std::uint64_t n, float weight,
                           nonfinite_policy policy, const control* own, const control* codec,
                           device_status* d_status) {
  if (codec->invalid != 0)
    return;
  if (policy == nonfinite_policy::fail && own != nullptr && own->nonfinite != 0)
    return;
  std::size_t held = 0;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride()) {
    const float v =
        Replace ? t[i]
                : commpress::detail::add_rn(state[i], commpress::detail::mul_rn(weight, t[i]));
    if (commpress::detail::is_finite(v)) {
      state[i] = v;
    } else {
      ++held;
    }
  }
  const unsigned sum = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(held));
  if ((threadIdx.x & 31u) == 0 && sum != 0 && d_status != nullptr)
    atomicAdd(&d_status->held, 1ull * sum);
}

/// Reports the step's input count, and errc::non_finite when the fail policy refused it.
template <class Unused = void>
COMMPRESS_KERNEL void feedback_report_kernel(nonfinite_policy policy, const control* own,
                                             device_status* d_status) {
  const unsigned long long bad = own->nonfinite;
  if (d_status == nullptr || bad == 0)
    return;
  atomicAdd(&d_status->nonfinite, bad);
  if (policy == nonfinite_policy::fail)
    report(d_status, errc::non_finite);
}

/// out[i] = state[i] as T, unless the payload failed validation.
template <class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    feedback_output_kernel(const float* state, std::uint64_t n, T* out, const control* codec) {
  if (codec->invalid != 0)
    return;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    out[i] = from_float<T>(state[i]);
}

/// Workspace of a feedback step: a control block, n floats, then the codec's workspace.
struct feedback_layout {
  control* own;
  float* t;
  std::span<std::byte> codec_ws;
  const control* codec; ///< the codec call's control block (front of codec_ws)
};

template <class C>
feedback_layout carve_feedback(const par_t& p, const C& c, std::uint64_t n, std::span<std::byte> ws,
                               const char* who) {
  const std::uint64_t need = control_bytes + align_up(4 * n) + workspace_bytes(p, c, n);
  COMMPRESS_EXPECTS(ws.size() >= need, errc::buffer_too_small, who,
                    "workspace smaller than feedback_workspace_bytes()");
  COMMPRESS_EXPECTS(reinterpret_cast<std::uintptr_t>(ws.data()) % 16 == 0, errc::invalid_argument,
                    who, "the workspace must be 16-byte aligned");
  feedback_layout l;
  l.own = reinterpret_cast<control*>(ws.data());
  l.t = reinterpret_cast<float*>(ws.data() + control_bytes);
  l.codec_ws = ws.subspan(control_bytes + align_up(4 * n));
  l.codec = reinterpret_cast<const control*>(l.codec_ws.data());
  return l;
}

inline void check_state(std::uint64_t state, std::uint64_t n, const char* who) {
  COMMPRESS_EXPECTS(state == n, errc::size_mismatch, who, "state and tensor sizes differ");
}

/// The device layout of a LoCo error in Storage S: the words of feedback/storage.hpp's
/// stored_rows (one row of n values) and, for store_int, one fp32 scale per block.
template <class S> struct loco_layout {
  static constexpr bool is_int = commpress::detail::is_store_int<S>;
  COMMPRESS_HOST_DEVICE static constexpr std::uint64_t word_bytes(std::uint64_t n) {
    if constexpr (std::same_as<S, store_f32>) {
      return 4 * n;
    } else if constexpr (std::same_as<S, store_bf16>) {
      return 2 * n;
    } else {
      return S::bits == 8 ? n : (n + 1) / 2;
    }
  }
  COMMPRESS_HOST_DEVICE static constexpr std::uint64_t scales(std::uint64_t n) {
    if constexpr (is_int) {
      return (n + S::block - 1) / S::block;
    } else {
      return 0;
    }
  }
  /// Value j of the stored row (stored_rows::load_row).
  __device__ static float load(const unsigned char* w, const float* sc, std::uint64_t j) {
    if constexpr (std::same_as<S, store_f32>) {
      return reinterpret_cast<const float*>(w)[j];
    } else if constexpr (std::same_as<S, store_bf16>) {
      return to_float(bfloat16{reinterpret_cast<const std::uint16_t*>(w)[j]});
    } else {
      int code;
      if constexpr (S::bits == 8) {
        code = static_cast<std::int8_t>(w[j]);
      } else {
        const int nib = (w[j / 2] >> (4 * (j % 2))) & 0xf;
        code = nib >= 8 ? nib - 16 : nib;
      }
      return commpress::detail::mul_rn(static_cast<float>(code), sc[j / S::block]);
    }
  }
  /// The stored code of x in a block of step `scale` (stored_rows::store_row).
  __device__ static int code(float x, float scale) {
    const float q = scale > 0.0f
                        ? commpress::detail::round_half_even(commpress::detail::div_rn(x, scale))
                        : 0.0f;
    return static_cast<int>(commpress::detail::min(commpress::detail::max(q, -S::qmax), S::qmax));
  }
};

/// e[i] = stored error, h[i] = screen(in[i]) + e[i]; counts the inputs.
template <class S, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    loco_input_kernel(const T* in, std::uint64_t n, const unsigned char* words, const float* scales,
                      nonfinite_policy policy, float* e, float* h, control* own) {
  std::size_t bad = 0;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride()) {
    const float ei = loco_layout<S>::load(words, scales, i);
    e[i] = ei;
    h[i] = commpress::detail::add_rn(commpress::detail::screen(to_float(in[i]), policy, bad), ei);
  }
  add_nonfinite(own, bad);
}

/// e = beta * e + (1 - beta) * r where finite (r = h - deQ, in h); beta == 0 takes r itself.
template <class Unused = void>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    loco_update_kernel(float* e, const float* r, std::uint64_t n, float beta,
                       nonfinite_policy policy, const control* own, const control* codec,
                       device_status* d_status) {
  if (codec->invalid != 0)
    return;
  if (policy == nonfinite_policy::fail && own->nonfinite != 0)
    return;
  const commpress::detail::error_update rule{beta, commpress::detail::sub_rn(1.0f, beta)};
  std::size_t held = 0;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    held += rule(r[i], e[i]) ? 1u : 0u;
  const unsigned sum = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(held));
  if ((threadIdx.x & 31u) == 0 && sum != 0 && d_status != nullptr)
    atomicAdd(&d_status->held, 1ull * sum);
}

/// Stores e back in S, or zeroes the storage on a reset step; one warp per storage block
/// (store_int) or a grid-stride loop (f32, bf16). Skipped when the update was.
template <class S>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    loco_store_kernel(const float* e, std::uint64_t n, bool reset, unsigned char* words,
                      float* scales, nonfinite_policy policy, const control* own,
                      const control* codec) {
  if (codec->invalid != 0)
    return;
  if (policy == nonfinite_policy::fail && own->nonfinite != 0)
    return;
  using L = loco_layout<S>;
  if constexpr (!L::is_int) {
    for (std::uint64_t i = thread_index(); i < n; i += grid_stride()) {
      if constexpr (std::same_as<S, store_f32>) {
        reinterpret_cast<float*>(words)[i] = reset ? 0.0f : e[i];
      } else {
        reinterpret_cast<std::uint16_t*>(words)[i] =
            reset ? std::uint16_t{0} : to_bfloat16(e[i]).bits;
      }
    }
  } else {
    const unsigned lane = threadIdx.x & 31u;
    const std::uint64_t warps = grid_stride() / 32;
    const std::uint64_t blocks = L::scales(n);
    for (std::uint64_t b = thread_index() / 32; b < blocks; b += warps) {
      const std::uint64_t lo = b * S::block;
      const std::uint64_t hi = lo + S::block < n ? lo + S::block : n;
      std::uint32_t amax = 0; // |e| bits: finite and non-negative, ordered as integers
      for (std::uint64_t j = lo + lane; j < hi; j += 32) {
        const std::uint32_t a = commpress::detail::float_to_bits(commpress::detail::abs(e[j]));
        amax = a > amax ? a : amax;
      }
      amax = __reduce_max_sync(0xffffffffu, amax);
      const float scale =
          reset ? 0.0f : commpress::detail::div_rn(commpress::detail::bits_to_float(amax), S::qmax);
      if (lane == 0)
        scales[b] = scale;
      if constexpr (S::bits == 8) {
        for (std::uint64_t j = lo + lane; j < hi; j += 32)
          words[j] = static_cast<unsigned char>(reset ? 0 : L::code(e[j], scale));
      } else {
        // Two codes per byte, element 2i in the low nibble; blocks are even, so a block owns
        // its bytes (an odd last element leaves the high nibble zero).
        for (std::uint64_t j = lo + 2 * lane; j < hi; j += 64) {
          const int q0 = reset ? 0 : L::code(e[j], scale);
          const int q1 = (reset || j + 1 >= hi) ? 0 : L::code(e[j + 1], scale);
          words[j / 2] = static_cast<unsigned char>((q0 & 0xf) | ((q1 & 0xf) << 4));
        }
      }
    }
  }
}

/// out[i] = the stored error value i.
template <class S>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    loco_dequantize_kernel(const unsigned char* words, const float* scales, std::uint64_t n,
                           float* out) {
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    out[i] = loco_layout<S>::load(words, scales, i);
}

} // namespace cuda::detail

namespace cuda {

/// @brief Workspace bytes of ef_encode, ef21_encode and ef21_decode for n elements.
template <codec C>
std::uint64_t feedback_workspace_bytes(const par_t& p, const C& c, std::uint64_t n) {
  return detail::control_bytes + detail::align_up(4 * n) + commpress::workspace_bytes(p, c, n);
}

/// @brief One EF sender step on the device: h = g + e; payload = C(h); e = h - deQ(payload)
/// where finite (feedback/ef.hpp). Same payload and residual bits as the CPU's EF.
/// @param d_residual the sender's residual e (n floats, device memory, initially zero)
/// @return payload bytes written to d_out
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <codec C, element T>
std::size_t ef_encode(const par_t& policy, const C& c, const context& ctx, std::span<const T> d_in,
                      std::span<float> d_residual, std::span<std::byte> d_out,
                      std::span<std::byte> d_workspace, device_status* d_status = nullptr) {
  namespace cd = detail;
  const std::uint64_t n = d_in.size();
  cd::check_state(d_residual.size(), n, "ef");
  const cd::feedback_layout l = cd::carve_feedback(policy, c, n, d_workspace, "ef");
  const cudaStream_t s = policy.stream;
  cd::clear_control(l.own, s);
  if (n > 0) {
    cd::feedback_input_kernel<<<cd::grid_for(n), cd::block_threads, 0, s>>>(
        d_in.data(), d_residual.data(), n, false, ctx.on_nonfinite, l.t, l.own);
    cd::check_launch();
  }
  const std::size_t bytes =
      commpress::encode(policy, c, ctx, std::span<const float>(l.t, n), d_out, l.codec_ws);
  // h - deQ(payload), with the receiver's own decoding (acc += -1 * v).
  commpress::decode_accumulate(policy, c, std::span<const std::byte>(d_out.first(bytes)),
                               std::span<float>(l.t, n), -1.0f, l.codec_ws);
  if (n > 0) {
    cd::feedback_update_kernel<true><<<cd::grid_for(n), cd::block_threads, 0, s>>>(
        d_residual.data(), l.t, n, 1.0f, ctx.on_nonfinite, l.own, l.codec, d_status);
    cd::check_launch();
  }
  cd::feedback_report_kernel<<<1, 1, 0, s>>>(ctx.on_nonfinite, l.own, d_status);
  cd::check_launch();
  return bytes;
}

/// @brief One EF21 sender step on the device: t = g - A; payload = C(t); A += deQ(payload)
/// where finite (feedback/ef21.hpp). The receiver's ef21_decode keeps the same A bit for bit.
/// @param d_mirror the sender's copy of the reconstruction A (n floats, initially zero)
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <codec C, element T>
std::size_t ef21_encode(const par_t& policy, const C& c, const context& ctx,
                        std::span<const T> d_in, std::span<float> d_mirror,
                        std::span<std::byte> d_out, std::span<std::byte> d_workspace,
                        device_status* d_status = nullptr) {
  namespace cd = detail;
  const std::uint64_t n = d_in.size();
  cd::check_state(d_mirror.size(), n, "ef21");
  const cd::feedback_layout l = cd::carve_feedback(policy, c, n, d_workspace, "ef21");
  const cudaStream_t s = policy.stream;
  cd::clear_control(l.own, s);
  if (n > 0) {
    cd::feedback_input_kernel<<<cd::grid_for(n), cd::block_threads, 0, s>>>(
        d_in.data(), d_mirror.data(), n, true, ctx.on_nonfinite, l.t, l.own);
    cd::check_launch();
  }
  const std::size_t bytes =
      commpress::encode(policy, c, ctx, std::span<const float>(l.t, n), d_out, l.codec_ws);
  commpress::decode(policy, c, std::span<const std::byte>(d_out.first(bytes)),
                    std::span<float>(l.t, n), l.codec_ws);
  if (n > 0) {
    cd::feedback_update_kernel<false><<<cd::grid_for(n), cd::block_threads, 0, s>>>(
        d_mirror.data(), l.t, n, 1.0f, ctx.on_nonfinite, l.own, l.codec, d_status);
    cd::check_launch();
  }
  cd::feedback_report_kernel<<<1, 1, 0, s>>>(ctx.on_nonfinite, l.own, d_status);
  cd::check_launch();
  return bytes;
}

/// @brief The EF21 receiver step: A += deQ(payload); out = A (as T). With weight != 1 it is
/// the data-parallel server mirror A += weight * deQ(payload) (pass an empty `d_out`).
/// @param d_status optional: the errc of an invalid payload (A and out are untouched then) and
///        the held count
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <codec C, element T>
void ef21_decode(const par_t& policy, const C& c, std::span<const std::byte> d_payload,
                 std::span<float> d_mirror, std::span<T> d_out, std::span<std::byte> d_workspace,
                 device_status* d_status = nullptr, float weight = 1.0f) {
  namespace cd = detail;
  const std::uint64_t n = d_mirror.size();
  COMMPRESS_EXPECTS(d_out.empty() || d_out.size() == n, errc::size_mismatch, "ef21",
                    "output and mirror sizes differ");
  const cd::feedback_layout l = cd::carve_feedback(policy, c, n, d_workspace, "ef21");
  const cudaStream_t s = policy.stream;
  commpress::decode(policy, c, d_payload, std::span<float>(l.t, n), l.codec_ws, d_status);
  if (n == 0)
    return;
  cd::feedback_update_kernel<false><<<cd::grid_for(n), cd::block_threads, 0, s>>>(
      d_mirror.data(), l.t, n, weight, nonfinite_policy::propagate, nullptr, l.codec, d_status);
  cd::check_launch();
  if (!d_out.empty()) {
    cd::feedback_output_kernel<<<cd::grid_for(n), cd::block_threads, 0, s>>>(d_mirror.data(), n,
                                                                             d_out.data(), l.codec);
    cd::check_launch();
  }
}

/// @brief A LoCo error in device memory, laid out as feedback/storage.hpp's stored_rows<S>
/// (one row of n values): `words` holds loco_error_word_bytes<S>(n) bytes, `scales`
/// loco_error_scales<S>(n) floats (store_int only). Zero both to start.
template <class S> struct loco_error {
  std::span<std::byte> words;
  std::span<float> scales;
};

/// @brief Bytes of a LoCo error's words for n values in storage S.
template <class S> constexpr std::uint64_t loco_error_word_bytes(std::uint64_t n) {
  return detail::loco_layout<S>::word_bytes(n);
}
/// @brief Scales of a LoCo error for n values in storage S (0 unless store_int).
template <class S> constexpr std::uint64_t loco_error_scales(std::uint64_t n) {
  return detail::loco_layout<S>::scales(n);
}

/// @brief Workspace bytes of loco_encode for n elements.
template <codec C> std::uint64_t loco_workspace_bytes(const par_t& p, const C& c, std::uint64_t n) {
  return detail::align_up(4 * n) + feedback_workspace_bytes(p, c, n);
}

/// @brief One LoCo sender step on the device: h = g + e; payload = C(h);
/// e = beta * e + (1 - beta) * (h - deQ(payload)) where finite, stored back in S, or zeroed
/// when (ctx.step + 1) is a multiple of f.reset_every (feedback/loco.hpp). Same payload and
/// stored error bits as the CPU's LoCo.
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <class S, codec C, element T>
std::size_t loco_encode(const par_t& policy, const loco<S>& f, const C& c, const context& ctx,
                        std::span<const T> d_in, loco_error<S> d_error, std::span<std::byte> d_out,
                        std::span<std::byte> d_workspace, device_status* d_status = nullptr) {
  namespace cd = detail;
  const std::uint64_t n = d_in.size();
  const status ok = f.can_implement(n);
  COMMPRESS_EXPECTS(ok, ok.code, "loco", ok.message);
  COMMPRESS_EXPECTS(d_error.words.size() >= loco_error_word_bytes<S>(n) &&
                        d_error.scales.size() >= loco_error_scales<S>(n),
                    errc::size_mismatch, "loco", "the error storage is not sized for the tensor");
  COMMPRESS_EXPECTS(d_workspace.size() >= loco_workspace_bytes(policy, c, n),
                    errc::buffer_too_small, "loco",
                    "workspace smaller than loco_workspace_bytes()");
  auto* e = reinterpret_cast<float*>(d_workspace.data());
  const cd::feedback_layout l =
      cd::carve_feedback(policy, c, n, d_workspace.subspan(cd::align_up(4 * n)), "loco");
  const cudaStream_t s = policy.stream;
  auto* words = reinterpret_cast<unsigned char*>(d_error.words.data());
  cd::clear_control(l.own, s);
  if (n > 0) {
    cd::loco_input_kernel<S><<<cd::grid_for(n), cd::block_threads, 0, s>>>(
        d_in.data(), n, words, d_error.scales.data(), ctx.on_nonfinite, e, l.t, l.own);
    cd::check_launch();
  }
  const std::size_t bytes =
      commpress::encode(policy, c, ctx, std::span<const float>(l.t, n), d_out, l.codec_ws);
  commpress::decode_accumulate(policy, c, std::span<const std::byte>(d_out.first(bytes)),
                               std::span<float>(l.t, n), -1.0f, l.codec_ws);
  if (n > 0) {
    cd::loco_update_kernel<<<cd::grid_for(n), cd::block_threads, 0, s>>>(
        e, l.t, n, f.beta, ctx.on_nonfinite, l.own, l.codec, d_status);
    cd::check_launch();
    const bool reset = f.reset_every != 0 && (ctx.step + 1) % f.reset_every == 0;
    const std::uint64_t work = cd::loco_layout<S>::is_int ? 32 * loco_error_scales<S>(n) : n;
    cd::loco_store_kernel<S><<<cd::grid_for(work), cd::block_threads, 0, s>>>(
        e, n, reset, words, d_error.scales.data(), ctx.on_nonfinite, l.own, l.codec);
    cd::check_launch();
  }
  cd::feedback_report_kernel<<<1, 1, 0, s>>>(ctx.on_nonfinite, l.own, d_status);
  cd::check_launch();
  return bytes;
}

/// @brief Writes the LoCo error's values (dequantized) to d_out (loco_state::error on the CPU).
template <class S>
void loco_error_values(const par_t& policy, loco_error<S> d_error, std::span<float> d_out) {
  const std::uint64_t n = d_out.size();
  if (n == 0)
    return;
  detail::loco_dequantize_kernel<S>
      <<<detail::grid_for(n), detail::block_threads, 0, policy.stream>>>(
          reinterpret_cast<const unsigned char*>(d_error.words.data()), d_error.scales.data(), n,
          d_out.data());
  detail::check_launch();
}

} // namespace cuda
} // namespace commpress
