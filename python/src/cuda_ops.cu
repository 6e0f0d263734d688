// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

/// @file
/// The device entry points (COMMPRESS_PYTHON_CUDA=ON): each forwards to the library's
/// backend/cuda/codec_ops.cuh entry point with cuda::par.on(stream). Every call only enqueues
/// work on the caller's stream; nothing here synchronises or allocates. Compiled by nvcc, with
/// no nanobind header, so the module's other translation units stay plain C++.

#include <cuda_runtime.h>

#include <string>

#include "binding.hpp"
#include "commpress/backend/cuda/codecs.cuh"

namespace commpress::py {

namespace {

cuda::par_t on_stream(const policy_ref& p) {
  int current = -1;
  COMMPRESS_CUDA_TRY(cudaGetDevice(&current));
  // Launching on another device than the arrays' would fail later and obscurely: refuse now.
  COMMPRESS_EXPECTS(p.device < 0 || p.device == current, errc::invalid_argument, "python",
                    "the arrays live on GPU " + std::to_string(p.device) +
                        " but the current device is " + std::to_string(current));
  return cuda::par.on(reinterpret_cast<cudaStream_t>(p.stream));
}

cuda::device_status* status_of(void* s) {
  return static_cast<cuda::device_status*>(s);
}

/// Whether codec C runs on the device: the block-scaled codecs of the kit and the rotated
/// codecs have no CUDA implementation yet.
template <class C> constexpr bool on_device = !block_scaled_codec<C>;
template <class C> constexpr bool on_device<rotated<C>> = false;

[[noreturn]] void host_only() {
  detail::throw_error(errc::invalid_argument, "python",
                      "this codec runs on the CPU backends only (no CUDA implementation yet)");
}

} // namespace

bool has_cuda() {
  return true;
}
std::uint64_t cuda_status_bytes() {
  return sizeof(cuda::device_status);
}

template <class C> std::uint64_t cuda_codec_ops<C>::workspace_bytes(const C& c, std::uint64_t n) {
  if constexpr (!on_device<C>)
    host_only();
  else
    return commpress::workspace_bytes(cuda::par, c, n);
}

template <class C>
void cuda_codec_ops<C>::encode(const policy_ref& p, const C& c, const context& ctx,
                               const tensor_ref& in, bytes out, bytes ws, void* st) {
  if constexpr (!on_device<C>) {
    host_only();
  } else {
    const cuda::par_t pol = on_stream(p);
    with_elements(in, [&](auto x) {
      using T = typename decltype(x)::element_type;
      commpress::encode(pol, c, ctx, std::span<const T>(x), out, ws, status_of(st));
    });
  }
}

template <class C>
void cuda_codec_ops<C>::decode(const policy_ref& p, const C& c, cbytes payload,
                               const tensor_ref& out, bytes ws, void* st) {
  if constexpr (!on_device<C>) {
    host_only();
  } else {
    const cuda::par_t pol = on_stream(p);
    with_elements(out, [&](auto y) { commpress::decode(pol, c, payload, y, ws, status_of(st)); });
  }
}

template <class C>
void cuda_codec_ops<C>::decode_accumulate(const policy_ref& p, const C& c, cbytes payload,
                                          std::span<float> acc, float weight, bytes ws, void* st) {
  if constexpr (!on_device<C>)
    host_only();
  else
    commpress::decode_accumulate(on_stream(p), c, payload, acc, weight, ws, status_of(st));
}

template <class C>
void cuda_codec_ops<C>::roundtrip(const policy_ref& p, const C& c, const context& ctx,
                                  std::span<float> x, bytes ws, void* st) {
  if constexpr (!on_device<C>)
    host_only();
  else
    commpress::roundtrip(on_stream(p), c, ctx, x, ws, status_of(st));
}

template struct cuda_codec_ops<identity>;
template struct cuda_codec_ops<cast>;
template struct cuda_codec_ops<quantize>;
template struct cuda_codec_ops<top_k>;
template struct cuda_codec_ops<random_k>;
template struct cuda_codec_ops<sign>;
template struct cuda_codec_ops<fp8>;
template struct cuda_codec_ops<mxfp8>;
template struct cuda_codec_ops<mxfp8_e5m2>;
template struct cuda_codec_ops<mxfp4>;
template struct cuda_codec_ops<nvfp4>;
template struct cuda_codec_ops<terngrad>;
template struct cuda_codec_ops<natural>;
template struct cuda_codec_ops<qsgd8>;
template struct cuda_codec_ops<qsgd4>;
template struct cuda_codec_ops<qsgd2>;
template struct cuda_codec_ops<rotated<quantize>>;
template struct cuda_codec_ops<rotated<sign>>;
template struct cuda_codec_ops<rotated<mxfp4>>;

} // namespace commpress::py
