// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// AQ-SGD on device memory (feedback/aq_sgd.hpp; Wang et al. 2022, docs/methods.md 6.1): the
/// per-sample cache m is gathered and scattered by sample id, with the same payloads and cache
/// bits as the CPU's aq_sgd step after step, for every cache storage (fp32, bf16, store_int).
///
/// The delta a - m(xi) lives in the workspace and goes through the codec's own encode and
/// decode (no codec math here). Cache updates apply the rows of a batch in order, as the CPU's
/// load_row/store_row loop does: one block per distinct id walks that id's rows in batch order,
/// so a sample appearing twice in a batch gets both updates, each stored (and for store_int
/// requantized) before the next. Calls only enqueue work on the policy's stream.

#include <cuda_runtime.h>

#include <concepts>
#include <cstdint>
#include <span>

#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/backend/cuda/feedback.cuh"
#include "commpress/backend/cuda/identity.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/backend/cuda/status.cuh"
#include "commpress/compress/identity.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/math.hpp"
#include "commpress/feedback/aq_sgd.hpp"
#include "commpress/feedback/storage.hpp"

namespace commpress {
namespace cuda {

/// @brief An AQ-SGD cache in device memory, laid out as feedback/storage.hpp's stored_rows<S>:
/// `samples` rows of `sample_size` values, row r's words at r * loco_error_word_bytes<S>(len)
/// bytes and its scales (store_int only) at r * loco_error_scales<S>(len). Zero both to start.
template <class S> struct aq_sgd_cache {
  std::span<std::byte> words;
  std::span<float> scales;
};

/// @brief Bytes of an AQ-SGD cache's words for configuration f.
template <class S> constexpr std::uint64_t aq_sgd_cache_word_bytes(const aq_sgd<S>& f) {
  return f.samples * detail::loco_layout<S>::word_bytes(f.sample_size);
}
/// @brief Scales of an AQ-SGD cache for configuration f (0 unless store_int).
template <class S> constexpr std::uint64_t aq_sgd_cache_scales(const aq_sgd<S>& f) {
  return f.samples * detail::loco_layout<S>::scales(f.sample_size);
}

} // namespace cuda

namespace cuda::detail {

/// A cache as kernels see it: row pointers from a sample id.
template <class S> struct cache_view {
  unsigned char* words;
  float* scales;
  std::uint64_t len;
  __device__ unsigned char* row_words(std::uint64_t id) const {
    return words + id * loco_layout<S>::word_bytes(len);
  }
  __device__ float* row_scales(std::uint64_t id) const {
    return scales + id * loco_layout<S>::scales(len);
  }
  __device__ float load(std::uint64_t id, std::uint64_t j) const {
    return loco_layout<S>::load(row_words(id), row_scales(id), j);
  }
};

/// Flags (own->scratch[0]) and reports errc::invalid_argument for a sample id >= samples: the
/// CPU throws before doing anything, so the caches are then left untouched.
template <class Unused = void>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    aq_check_ids_kernel(const std::uint64_t* ids, std::uint64_t rows, std::uint64_t samples,
                        control* own, device_status* d_status) {
  for (std::uint64_t r = thread_index(); r < rows; r += grid_stride())
    if (ids[r] >= samples) {
      atomicExch(&own->scratch[0], 1ull);
      report(d_status, errc::invalid_argument);
    }
}

/// t[i] = screen(a[i]) - m(ids[i / len])[i % len], counting the inputs (aq_sgd encode).
template <class S, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    aq_gather_kernel(const T* in, const std::uint64_t* ids, std::uint64_t n, cache_view<S> m,
                     std::uint64_t samples, nonfinite_policy policy, float* t, control* own) {
  std::size_t bad = 0;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride()) {
    const std::uint64_t id = ids[i / m.len];
    const float mi = id < samples ? m.load(id, i % m.len) : 0.0f; // bad ids are refused later
    t[i] = commpress::detail::sub_rn(commpress::detail::screen(to_float(in[i]), policy, bad), mi);
  }
  add_nonfinite(own, bad);
}

/// Decides whether the step may touch the caches (own->invalid): not with a bad id, a payload
/// that failed validation, NaN/Inf inputs under the fail policy, or (receiver) a payload whose
/// step is on the other side of warmup_steps than the receiver's. A sender with a bad id
/// poisons its payload's magic so that no receiver applies it.
template <class Unused = void>
COMMPRESS_KERNEL void aq_gate_kernel(const control* codec, nonfinite_policy policy,
                                     const unsigned char* d_payload, unsigned char* d_sent,
                                     std::uint64_t warmup_steps, bool warm, control* own,
                                     device_status* d_status) {
  bool refuse = own->scratch[0] != 0 || codec->invalid != 0 ||
                (policy == nonfinite_policy::fail && own->nonfinite != 0);
  const bool sender = d_sent != nullptr;
  if (sender && own->scratch[0] != 0)
    for (int i = 0; i < 4; ++i)
      d_sent[i] = 0;
  if (!sender && !refuse && (load_word<std::uint64_t>(d_payload + 32) < warmup_steps) != warm) {
    refuse = true;
    report(d_status, errc::stream_mismatch);
  }
  own->invalid = refuse ? 1u : 0u;
}

/// Applies the decoded rows to the cache in batch order. One block per distinct id (the block
/// of its first row) walks every row of that id: phase 1 writes the new float row over t
/// (warm-up: t where finite, else m; else m + t where finite, else m), phase 2 stores it in S
/// (store_int: one warp per storage block, as loco_store_kernel), so the next row of the same
/// id loads what was stored, exactly as the CPU's load_row/store_row loop.
template <class S, bool Warm>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    aq_scatter_kernel(const std::uint64_t* ids, std::uint64_t rows, cache_view<S> m, float* t,
                      const control* own, device_status* d_status) {
  if (own->invalid != 0)
    return;
  using L = loco_layout<S>;
  const std::uint64_t len = m.len;
  std::size_t held = 0;
  for (std::uint64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::uint64_t id = ids[r];
    bool seen = false;
    for (std::uint64_t q = threadIdx.x; q < r; q += blockDim.x)
      seen = seen || ids[q] == id;
    if (__syncthreads_or(seen))
      continue; // an earlier row of this id owns it
    for (std::uint64_t q = r; q < rows; ++q) {
      if (ids[q] != id)
        continue;
      float* row = t + q * len;
      for (std::uint64_t j = threadIdx.x; j < len; j += blockDim.x) {
        const float old = m.load(id, j);
        const float v =
            Warm ? row[j] : commpress::detail::add_rn(old, commpress::detail::mul_rn(1.0f, row[j]));
        if (commpress::detail::is_finite(v)) {
          row[j] = v;
        } else {
          row[j] = old;
          ++held;
        }
      }
      __syncthreads();
      unsigned char* w = m.row_words(id);
      if constexpr (!L::is_int) {
        for (std::uint64_t j = threadIdx.x; j < len; j += blockDim.x) {
          if constexpr (std::same_as<S, store_f32>) {
            reinterpret_cast<float*>(w)[j] = row[j];
          } else {
            reinterpret_cast<std::uint16_t*>(w)[j] = to_bfloat16(row[j]).bits;
          }
        }
      } else {
        float* sc = m.row_scales(id);
        const unsigned lane = threadIdx.x & 31u;
        for (std::uint64_t b = threadIdx.x / 32; b < L::scales(len); b += blockDim.x / 32) {
          const std::uint64_t lo = b * S::block;
          const std::uint64_t hi = lo + S::block < len ? lo + S::block : len;
          std::uint32_t amax = 0; // |v| bits: finite and non-negative, ordered as integers
          for (std::uint64_t j = lo + lane; j < hi; j += 32) {
            const std::uint32_t a =
                commpress::detail::float_to_bits(commpress::detail::abs(row[j]));
            amax = a > amax ? a : amax;
          }
          amax = __reduce_max_sync(0xffffffffu, amax);
          const float scale =
              commpress::detail::div_rn(commpress::detail::bits_to_float(amax), S::qmax);
          if (lane == 0)
            sc[b] = scale;
          if constexpr (S::bits == 8) {
            for (std::uint64_t j = lo + lane; j < hi; j += 32)
              w[j] = static_cast<unsigned char>(L::code(row[j], scale));
          } else {
            for (std::uint64_t j = lo + 2 * lane; j < hi; j += 64) {
              const int q0 = L::code(row[j], scale);
              const int q1 = j + 1 < hi ? L::code(row[j + 1], scale) : 0;
              w[j / 2] = static_cast<unsigned char>((q0 & 0xf) | ((q1 & 0xf) << 4));
            }
          }
        }
      }
      __syncthreads(); // the next row of this id loads what was just stored
    }
  }
  const unsigned sum = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(held));
  if ((threadIdx.x & 31u) == 0 && sum != 0 && d_status != nullptr)
    atomicAdd(&d_status->held, 1ull * sum);
}

/// The receiver's output: t itself in warm-up (a exactly), else m(ids[i / len]) after the
/// update; nothing when the step was refused.
template <class S, class T>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    aq_output_kernel(const std::uint64_t* ids, std::uint64_t n, cache_view<S> m, const float* t,
                     bool warm, T* out, const control* own) {
  if (own->invalid != 0)
    return;
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    out[i] = from_float<T>(warm ? t[i] : m.load(ids[i / m.len], i % m.len));
}

template <class S>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    aq_dequantize_kernel(cache_view<S> m, std::uint64_t n, float* out) {
  for (std::uint64_t i = thread_index(); i < n; i += grid_stride())
    out[i] = m.load(i / m.len, i % m.len);
}

/// One block per batch row (bounded like every grid).
constexpr unsigned row_grid(std::uint64_t rows) {
  return static_cast<unsigned>(rows < max_blocks ? rows : max_blocks);
}

template <class S>
cache_view<S> check_cache(const aq_sgd<S>& f, aq_sgd_cache<S> m, std::uint64_t ids,
                          std::uint64_t n) {
  const status ok = f.can_implement(n);
  COMMPRESS_EXPECTS(ok, ok.code, "aq_sgd", ok.message);
  COMMPRESS_EXPECTS(ids * f.sample_size == n, errc::size_mismatch, "aq_sgd",
                    "the sample ids do not cover the tensor's rows");
  COMMPRESS_EXPECTS(m.words.size() >= aq_sgd_cache_word_bytes(f) &&
                        m.scales.size() >= aq_sgd_cache_scales(f),
                    errc::size_mismatch, "aq_sgd", "the cache is not sized for the configuration");
  return {reinterpret_cast<unsigned char*>(m.words.data()), m.scales.data(), f.sample_size};
}

} // namespace cuda::detail

namespace cuda {

/// @brief Workspace bytes of aq_sgd_encode and aq_sgd_decode for n elements: a control block,
/// the delta (n floats), then the larger of the codec's and the warm-up identity's workspace.
template <class S, codec C>
std::uint64_t aq_sgd_workspace_bytes(const par_t& p, const aq_sgd<S>&, const C& c,
                                     std::uint64_t n) {
  const std::uint64_t coded = commpress::workspace_bytes(p, c, n);
  const std::uint64_t plain = commpress::workspace_bytes(p, identity{}, n);
  return detail::control_bytes + detail::align_up(4 * n) + (coded > plain ? coded : plain);
}

/// @brief One AQ-SGD sender step on the device, the CPU's aq_sgd encode: in warm-up
/// (ctx.step < f.warmup_steps) the identity payload and m(xi) = storage(a) where finite, else
/// payload = C(a - m(xi)) and m(xi) += deQ(payload) where finite.
/// @param d_ids one sample id per row of d_in (device memory); an id >= f.samples reports
///        errc::invalid_argument, leaves the cache untouched and poisons the payload's magic
/// @param d_out at least max(max_payload_bytes(c, n), max_payload_bytes(identity{}, n)) bytes
/// @param d_status optional: non-finite inputs, held cache elements, errors
/// @return payload bytes written to d_out
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <class S, codec C, element T>
std::size_t aq_sgd_encode(const par_t& policy, const aq_sgd<S>& f, const C& c, const context& ctx,
                          std::span<const std::uint64_t> d_ids, std::span<const T> d_in,
                          aq_sgd_cache<S> d_cache, std::span<std::byte> d_out,
                          std::span<std::byte> d_workspace, device_status* d_status = nullptr) {
  namespace cd = detail;
  const std::uint64_t n = d_in.size();
  const std::uint64_t rows = d_ids.size();
  const cd::cache_view<S> m = cd::check_cache(f, d_cache, rows, n);
  COMMPRESS_EXPECTS(d_workspace.size() >= aq_sgd_workspace_bytes(policy, f, c, n),
                    errc::buffer_too_small, "aq_sgd",
                    "workspace smaller than aq_sgd_workspace_bytes()");
  const cd::feedback_layout l = cd::carve_feedback(policy, identity{}, n, d_workspace, "aq_sgd");
  const cudaStream_t s = policy.stream;
  const bool warm = ctx.step < f.warmup_steps;
  cd::clear_control(l.own, s);
  if (rows > 0) {
    cd::aq_check_ids_kernel<<<cd::grid_for(rows), cd::block_threads, 0, s>>>(
        d_ids.data(), rows, f.samples, l.own, d_status);
    cd::check_launch();
  }
  std::size_t bytes = 0;
  if (warm) {
    bytes = commpress::encode(policy, identity{}, ctx, d_in, d_out, l.codec_ws, d_status);
    commpress::decode(policy, identity{}, std::span<const std::byte>(d_out.first(bytes)),
                      std::span<float>(l.t, n), l.codec_ws);
  } else {
    if (n > 0) {
      cd::aq_gather_kernel<S><<<cd::grid_for(n), cd::block_threads, 0, s>>>(
          d_in.data(), d_ids.data(), n, m, f.samples, ctx.on_nonfinite, l.t, l.own);
      cd::check_launch();
    }
    bytes = commpress::encode(policy, c, ctx, std::span<const float>(l.t, n), d_out, l.codec_ws);
    commpress::decode(policy, c, std::span<const std::byte>(d_out.first(bytes)),
                      std::span<float>(l.t, n), l.codec_ws);
  }
  auto* sent = reinterpret_cast<unsigned char*>(d_out.data());
  cd::aq_gate_kernel<<<1, 1, 0, s>>>(l.codec, ctx.on_nonfinite, sent, sent, f.warmup_steps, warm,
                                     l.own, d_status);
  cd::check_launch();
  if (rows > 0) {
    if (warm) {
      cd::aq_scatter_kernel<S, true><<<cd::row_grid(rows), cd::block_threads, 0, s>>>(
          d_ids.data(), rows, m, l.t, l.own, d_status);
    } else {
      cd::aq_scatter_kernel<S, false><<<cd::row_grid(rows), cd::block_threads, 0, s>>>(
          d_ids.data(), rows, m, l.t, l.own, d_status);
    }
    cd::check_launch();
  }
  if (!warm) { // warm-up's inputs were reported by the identity encode
    cd::feedback_report_kernel<<<1, 1, 0, s>>>(ctx.on_nonfinite, l.own, d_status);
    cd::check_launch();
  }
  return bytes;
}

/// @brief The AQ-SGD receiver step on the device: in warm-up the identity payload's a is the
/// output and m(xi) = storage(a) where finite; else m(xi) += deQ(payload) where finite and the
/// output is m(xi). The CPU reads the warm-up decision from the payload's step; a device call
/// cannot branch on device bytes, so the caller passes its own `step` and a payload whose step
/// is on the other side of f.warmup_steps reports errc::stream_mismatch.
/// @param d_status optional: the errc of an invalid payload or id (cache and output are then
///        untouched) and the held count
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <class S, codec C, element T>
void aq_sgd_decode(const par_t& policy, const aq_sgd<S>& f, const C& c, std::uint64_t step,
                   std::span<const std::uint64_t> d_ids, std::span<const std::byte> d_payload,
                   aq_sgd_cache<S> d_cache, std::span<T> d_out, std::span<std::byte> d_workspace,
                   device_status* d_status = nullptr) {
  namespace cd = detail;
  const std::uint64_t n = d_out.size();
  const std::uint64_t rows = d_ids.size();
  const cd::cache_view<S> m = cd::check_cache(f, d_cache, rows, n);
  COMMPRESS_EXPECTS(d_workspace.size() >= aq_sgd_workspace_bytes(policy, f, c, n),
                    errc::buffer_too_small, "aq_sgd",
                    "workspace smaller than aq_sgd_workspace_bytes()");
  COMMPRESS_EXPECTS(d_payload.size() >= format::header_bytes, errc::truncated, "payload",
                    "payload shorter than the 64-byte header");
  const cd::feedback_layout l = cd::carve_feedback(policy, identity{}, n, d_workspace, "aq_sgd");
  const cudaStream_t s = policy.stream;
  const bool warm = step < f.warmup_steps;
  cd::clear_control(l.own, s);
  if (rows > 0) {
    cd::aq_check_ids_kernel<<<cd::grid_for(rows), cd::block_threads, 0, s>>>(
        d_ids.data(), rows, f.samples, l.own, d_status);
    cd::check_launch();
  }
  if (warm) {
    commpress::decode(policy, identity{}, d_payload, std::span<float>(l.t, n), l.codec_ws,
                      d_status);
  } else {
    commpress::decode(policy, c, d_payload, std::span<float>(l.t, n), l.codec_ws, d_status);
  }
  const auto* p = reinterpret_cast<const unsigned char*>(d_payload.data());
  cd::aq_gate_kernel<<<1, 1, 0, s>>>(l.codec, nonfinite_policy::propagate, p, nullptr,
                                     f.warmup_steps, warm, l.own, d_status);
  cd::check_launch();
  if (n == 0)
    return;
  // Warm-up outputs a itself, before the scatter overwrites the rows of t.
  if (warm) {
    cd::aq_output_kernel<S><<<cd::grid_for(n), cd::block_threads, 0, s>>>(
        d_ids.data(), n, m, l.t, true, d_out.data(), l.own);
    cd::check_launch();
    cd::aq_scatter_kernel<S, true><<<cd::row_grid(rows), cd::block_threads, 0, s>>>(
        d_ids.data(), rows, m, l.t, l.own, d_status);
    cd::check_launch();
  } else {
    cd::aq_scatter_kernel<S, false><<<cd::row_grid(rows), cd::block_threads, 0, s>>>(
        d_ids.data(), rows, m, l.t, l.own, d_status);
    cd::check_launch();
    cd::aq_output_kernel<S><<<cd::grid_for(n), cd::block_threads, 0, s>>>(
        d_ids.data(), n, m, l.t, false, d_out.data(), l.own);
    cd::check_launch();
  }
}

/// @brief Writes the cache's values (samples x sample_size floats, dequantized) to d_out, as
/// aq_sgd_state::sample(id) for every id on the CPU.
template <class S>
void aq_sgd_cache_values(const par_t& policy, const aq_sgd<S>& f, aq_sgd_cache<S> d_cache,
                         std::span<float> d_out) {
  const std::uint64_t n = f.samples * f.sample_size;
  COMMPRESS_EXPECTS(d_out.size() == n, errc::size_mismatch, "aq_sgd",
                    "output is not samples x sample_size floats");
  if (n == 0)
    return;
  const detail::cache_view<S> m{reinterpret_cast<unsigned char*>(d_cache.words.data()),
                                d_cache.scales.data(), f.sample_size};
  detail::aq_dequantize_kernel<S>
      <<<detail::grid_for(n), detail::block_threads, 0, policy.stream>>>(m, n, d_out.data());
  detail::check_launch();
}

} // namespace cuda
} // namespace commpress
