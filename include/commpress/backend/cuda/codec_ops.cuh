// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The codec entry points for device memory: encode, decode, decode_accumulate, roundtrip with
/// `commpress::cuda::par.on(stream)`, producing the same bytes as `commpress::cpu::seq`.
///
/// Every call only enqueues kernels (and one memset) on the policy's stream: it never
/// synchronises, never allocates, and can be captured into a CUDA graph. Host-checkable
/// preconditions (configuration, span sizes, alignment) throw `commpress::error` before anything
/// is enqueued, exactly as on the CPU. What depends on the data (a corrupted payload, NaN/Inf
/// inputs) is reported in a caller-owned `cuda::device_status` in device memory (docs/cuda.md):
/// decoding a payload that fails validation writes nothing to the output, like the CPU's throw.
///
/// Backends implement `detail::codec_impl<Codec, cuda::par_t>` with
/// - `workspace_bytes(c, n)`: the codec's own scratch;
/// - `encode_body<T>(stream, c, ctx, d_in, n, d_body, d_ws, ctrl)`: writes the body and adds
///   the non-finite inputs to ctrl->nonfinite;
/// - `decode_body<T>(stream, c, d_header, d_body, d_out, n, d_ws, ctrl, d_status)` and
///   `accumulate_body(stream, c, d_header, d_body, d_acc, n, weight, d_ws, ctrl, d_status)`:
///   write nothing when ctrl->invalid is set; codecs whose body can be malformed beyond what
///   the header check sees (top_k's indices) validate it first and report errc::corrupt.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "commpress/backend/cuda/detail/checksum.cuh"
#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/backend/cuda/error.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/backend/cuda/status.cuh"
#include "commpress/core/concepts.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/format/header.hpp"

namespace commpress {

namespace cuda::detail {

/// The 64 header bytes, built on the host with format::write_header and passed to a kernel by
/// value: kernel arguments are copied at launch (and into a captured graph), so no host buffer
/// has to outlive the asynchronous call.
struct header_image {
  unsigned char b[format::header_bytes];
};

/// What a decode expects to find in a payload header (passed by value to validate_kernel).
struct expectation {
  std::uint8_t codec;
  std::uint8_t params[16]; ///< codec_params as a plain array (std::array is host-only code)
  std::uint64_t count;
  std::uint64_t body_bytes;
  std::uint64_t payload_bytes; ///< bytes the caller's span holds
};

template <class C, class T>
header_image make_header(const C& c, const context& ctx, std::uint64_t n) {
  header_image img;
  format::write_header(format::header_of(c, ctx, dtype_of_v<T>, n),
                       reinterpret_cast<std::byte*>(img.b));
  return img;
}

/// Writes the header and its checksum after the body kernels and chunk_crc_kernel; reports
/// the non-finite count. Under nonfinite_policy::fail with NaN/Inf inputs the magic is zeroed,
/// so every decoder refuses the payload (errc::bad_magic), and the status gets non_finite.
template <class Unused = void>
COMMPRESS_KERNEL void seal_kernel(header_image h, std::uint64_t chunks, nonfinite_policy policy,
                                  crc_powers t, const control* ctrl, unsigned char* d_out,
                                  device_status* d_status) {
  const unsigned long long bad = ctrl->nonfinite;
  if (policy == nonfinite_policy::fail && bad != 0) {
    for (int i = 0; i < 4; ++i)
      h.b[i] = 0;
    report(d_status, errc::non_finite);
  }
  const std::uint32_t crc = payload_crc(h.b, chunks, ctrl->crc, t);
  for (std::size_t i = 0; i < format::field::crc; ++i)
    d_out[i] = h.b[i];
  for (int i = 0; i < 4; ++i)
    d_out[format::field::crc + i] = static_cast<unsigned char>(crc >> (8 * i));
  if (d_status != nullptr && bad != 0)
    atomicAdd(&d_status->nonfinite, bad);
}

/// format::validate on the device, check for check and in the same order, so a payload gets
/// the same errc on both backends; a failure sets ctrl->invalid and reports the code.
template <class Unused = void>
COMMPRESS_KERNEL void validate_kernel(const unsigned char* p, expectation e, crc_powers t,
                                      control* ctrl, device_status* d_status) {
  namespace field = format::field;
  const std::uint64_t declared = load_word<std::uint64_t>(p + field::body_bytes);
  errc err = errc::ok;
  if (p[field::magic] != 'C' || p[field::magic + 1] != 'P' || p[field::magic + 2] != 'R' ||
      p[field::magic + 3] != 'S') { // format::magic (a host std::array)
    err = errc::bad_magic;
  } else if (p[field::version] != format::version) {
    err = errc::bad_version;
  } else if (!format::transform_byte::known(p[field::transform])) {
    err = errc::corrupt;
  } else if (declared > e.payload_bytes - format::header_bytes) {
    err = errc::truncated;
  } else if (load_word<std::uint32_t>(p + field::crc) !=
             payload_crc(p, crc_chunks(declared), ctrl->crc, t)) {
    err = errc::checksum_mismatch;
  } else if (p[field::element] < static_cast<unsigned>(dtype::f32) ||
             p[field::element] > static_cast<unsigned>(dtype::bf16)) {
    err = errc::corrupt;
  } else if (p[field::codec] != e.codec) {
    err = errc::codec_mismatch;
  } else {
    bool same = true;
    for (int i = 0; i < 16; ++i)
      same = same && p[field::params + i] == e.params[i];
    if (!same) {
      err = errc::codec_mismatch;
    } else if (p[field::transform] != format::transform_byte::none) {
      err = errc::codec_mismatch; // the device codecs rotate nothing
    } else if (load_word<std::uint64_t>(p + field::count) != e.count) {
      err = errc::size_mismatch;
    } else if (declared != e.body_bytes) {
      err = errc::corrupt;
    }
  }
  if (err != errc::ok) {
    ctrl->invalid = 1;
    report(d_status, err);
  }
}

/// Between the encode and decode halves of a roundtrip: stores the header the decode reads,
/// reports the non-finite count, and under nonfinite_policy::fail with NaN/Inf inputs blocks
/// the decode so `x` is left untouched (the CPU refuses such a call).
template <class Unused = void>
COMMPRESS_KERNEL void roundtrip_gate_kernel(header_image h, nonfinite_policy policy, control* ctrl,
                                            device_status* d_status) {
  for (std::size_t i = 0; i < format::header_bytes; ++i)
    ctrl->header[i] = h.b[i];
  const unsigned long long bad = ctrl->nonfinite;
  if (policy == nonfinite_policy::fail && bad != 0) {
    ctrl->invalid = 1;
    report(d_status, errc::non_finite);
  }
  if (d_status != nullptr && bad != 0)
    atomicAdd(&d_status->nonfinite, bad);
}

struct workspace_layout {
  control* ctrl;
  std::byte* own;      ///< the codec's scratch
  unsigned char* body; ///< a body for roundtrip
};

template <class C> std::uint64_t own_workspace(const C& c, std::uint64_t n) {
  return commpress::detail::codec_impl<C, par_t>::workspace_bytes(c, n);
}

template <class C>
workspace_layout carve(const C& c, std::uint64_t n, std::span<std::byte> ws, const char* who) {
  COMMPRESS_EXPECTS(reinterpret_cast<std::uintptr_t>(ws.data()) % 16 == 0, errc::invalid_argument,
                    who, "the workspace must be 16-byte aligned");
  workspace_layout l;
  l.ctrl = reinterpret_cast<control*>(ws.data());
  l.own = ws.data() + control_bytes;
  l.body =
      reinterpret_cast<unsigned char*>(ws.data() + control_bytes + align_up(own_workspace(c, n)));
  return l;
}

template <class C> void check_can_implement(const C& c, std::uint64_t n) {
  const status s = c.can_implement(n);
  COMMPRESS_EXPECTS(s, s.code, "codec", s.message);
}

inline void clear_control(control* ctrl, cudaStream_t stream) {
  COMMPRESS_CUDA_TRY(cudaMemsetAsync(ctrl, 0, sizeof(control), stream));
}

/// Enqueues the header validation of a payload (its checksum chunks, then validate_kernel).
template <class C>
void enqueue_validation(const C& c, std::uint64_t n, std::span<const std::byte> d_payload,
                        control* ctrl, device_status* d_status, cudaStream_t stream) {
  const auto* p = reinterpret_cast<const unsigned char*>(d_payload.data());
  launch_chunk_crc(p + format::header_bytes, p, d_payload.size() - format::header_bytes, ctrl,
                   stream);
  expectation e{static_cast<std::uint8_t>(C::id), {}, n, c.body_bytes(n), d_payload.size()};
  const codec_params params = c.params();
  for (std::size_t i = 0; i < params.size(); ++i)
    e.params[i] = params[i];
  validate_kernel<<<1, 1, 0, stream>>>(p, e, crc_powers_table, ctrl, d_status);
  check_launch();
}

} // namespace cuda::detail

/// @brief Workspace bytes any CUDA call (encode, decode, decode_accumulate, roundtrip) needs for
/// n elements: a control block, the codec's scratch and, for roundtrip, one body.
template <codec C> std::uint64_t workspace_bytes(const cuda::par_t&, const C& c, std::uint64_t n) {
  return cuda::detail::control_bytes + cuda::detail::align_up(cuda::detail::own_workspace(c, n)) +
         cuda::detail::align_up(c.body_bytes(n));
}

/// @brief Encodes device tensor `d_in` into a payload at the front of device buffer `d_out`,
/// byte for byte what `encode(cpu::seq, ...)` writes for the same input.
/// @param d_out at least max_payload_bytes(c, n) bytes of device memory
/// @param d_workspace at least workspace_bytes(policy, c, n) bytes of device memory, 16-byte
///        aligned; it must not be used by another call in flight
/// @param d_status optional: receives the non-finite input count and, under
///        nonfinite_policy::fail with NaN/Inf inputs, errc::non_finite (the payload then carries
///        a zeroed magic, so any decoder refuses it)
/// @return the payload bytes (max_payload_bytes(c, n))
/// @throws commpress::error for an invalid configuration or small/misaligned buffers, before
///         anything is enqueued; commpress::cuda_error when a launch fails
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <codec C, element T>
std::size_t encode(const cuda::par_t& policy, const C& c, const context& ctx,
                   std::span<const T> d_in, std::span<std::byte> d_out,
                   std::span<std::byte> d_workspace, cuda::device_status* d_status = nullptr) {
  namespace cd = cuda::detail;
  using impl = detail::codec_impl<C, cuda::par_t>;
  const std::uint64_t n = d_in.size();
  cd::check_can_implement(c, n);
  const std::uint64_t body = c.body_bytes(n);
  COMMPRESS_EXPECTS(d_out.size() >= format::header_bytes + body, errc::buffer_too_small, "encode",
                    "output holds " + std::to_string(d_out.size()) + " bytes, the payload needs " +
                        std::to_string(format::header_bytes + body));
  COMMPRESS_EXPECTS(d_workspace.size() >= workspace_bytes(policy, c, n), errc::buffer_too_small,
                    "encode", "workspace smaller than workspace_bytes()");
  const cd::workspace_layout ws = cd::carve(c, n, d_workspace, "encode");
  auto* out = reinterpret_cast<unsigned char*>(d_out.data());
  cd::clear_control(ws.ctrl, policy.stream);
  impl::template encode_body<T>(policy.stream, c, ctx, d_in.data(), n, out + format::header_bytes,
                                ws.own, ws.ctrl);
  cd::launch_chunk_crc(out + format::header_bytes, nullptr, body, ws.ctrl, policy.stream);
  cd::seal_kernel<<<1, 1, 0, policy.stream>>>(cd::make_header<C, T>(c, ctx, n),
                                              cd::crc_chunks(body), ctx.on_nonfinite,
                                              cd::crc_powers_table, ws.ctrl, out, d_status);
  cd::check_launch();
  return static_cast<std::size_t>(format::header_bytes + body);
}

/// @brief Validates device payload `d_payload` on the device and decodes it into `d_out`.
/// @param d_status optional: receives the errc of a payload that fails validation (as
///        format::validate would throw it); `d_out` is left untouched then
/// @throws commpress::error for an invalid configuration, a span shorter than the header, or a
///         small workspace, before anything is enqueued
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <codec C, element T>
void decode(const cuda::par_t& policy, const C& c, std::span<const std::byte> d_payload,
            std::span<T> d_out, std::span<std::byte> d_workspace,
            cuda::device_status* d_status = nullptr) {
  namespace cd = cuda::detail;
  const std::uint64_t n = d_out.size();
  cd::check_can_implement(c, n);
  COMMPRESS_EXPECTS(d_payload.size() >= format::header_bytes, errc::truncated, "payload",
                    "payload of " + std::to_string(d_payload.size()) +
                        " bytes is shorter than the 64-byte header");
  COMMPRESS_EXPECTS(d_workspace.size() >= workspace_bytes(policy, c, n), errc::buffer_too_small,
                    "decode", "workspace smaller than workspace_bytes()");
  const cd::workspace_layout ws = cd::carve(c, n, d_workspace, "decode");
  const auto* p = reinterpret_cast<const unsigned char*>(d_payload.data());
  cd::clear_control(ws.ctrl, policy.stream);
  cd::enqueue_validation(c, n, d_payload, ws.ctrl, d_status, policy.stream);
  detail::codec_impl<C, cuda::par_t>::template decode_body<T>(
      policy.stream, c, p, p + format::header_bytes, d_out.data(), n, ws.own, ws.ctrl, d_status);
}

/// @brief Validates `d_payload` on the device and adds `weight * decoded` to `d_acc`
/// (acc[i] += weight * x[i], rounded as on the CPU).
/// @param d_status optional: receives the errc of an invalid payload; `d_acc` is untouched then
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <codec C>
void decode_accumulate(const cuda::par_t& policy, const C& c, std::span<const std::byte> d_payload,
                       std::span<float> d_acc, float weight, std::span<std::byte> d_workspace,
                       cuda::device_status* d_status = nullptr) {
  namespace cd = cuda::detail;
  const std::uint64_t n = d_acc.size();
  cd::check_can_implement(c, n);
  COMMPRESS_EXPECTS(d_payload.size() >= format::header_bytes, errc::truncated, "payload",
                    "payload of " + std::to_string(d_payload.size()) +
                        " bytes is shorter than the 64-byte header");
  COMMPRESS_EXPECTS(d_workspace.size() >= workspace_bytes(policy, c, n), errc::buffer_too_small,
                    "decode_accumulate", "workspace smaller than workspace_bytes()");
  const cd::workspace_layout ws = cd::carve(c, n, d_workspace, "decode_accumulate");
  const auto* p = reinterpret_cast<const unsigned char*>(d_payload.data());
  cd::clear_control(ws.ctrl, policy.stream);
  cd::enqueue_validation(c, n, d_payload, ws.ctrl, d_status, policy.stream);
  detail::codec_impl<C, cuda::par_t>::accumulate_body(policy.stream, c, p, p + format::header_bytes,
                                                      d_acc.data(), n, weight, ws.own, ws.ctrl,
                                                      d_status);
}

/// @brief Replaces device tensor `d_x` by C(x), bit-identical to decode(encode(x)) (and to
/// roundtrip(cpu::seq, ...)), without a payload: what error feedback needs.
/// @param d_status optional: receives the non-finite count and, under nonfinite_policy::fail
///        with NaN/Inf inputs, errc::non_finite (`d_x` is left untouched then)
/// @note Asynchronous on policy.stream; no synchronisation, no allocation, graph-capturable.
template <codec C>
void roundtrip(const cuda::par_t& policy, const C& c, const context& ctx, std::span<float> d_x,
               std::span<std::byte> d_workspace, cuda::device_status* d_status = nullptr) {
  namespace cd = cuda::detail;
  using impl = detail::codec_impl<C, cuda::par_t>;
  const std::uint64_t n = d_x.size();
  cd::check_can_implement(c, n);
  COMMPRESS_EXPECTS(d_workspace.size() >= workspace_bytes(policy, c, n), errc::buffer_too_small,
                    "roundtrip", "workspace smaller than workspace_bytes()");
  const cd::workspace_layout ws = cd::carve(c, n, d_workspace, "roundtrip");
  cd::clear_control(ws.ctrl, policy.stream);
  impl::template encode_body<float>(policy.stream, c, ctx, d_x.data(), n, ws.body, ws.own, ws.ctrl);
  cd::roundtrip_gate_kernel<<<1, 1, 0, policy.stream>>>(cd::make_header<C, float>(c, ctx, n),
                                                        ctx.on_nonfinite, ws.ctrl, d_status);
  cd::check_launch();
  const auto* header =
      reinterpret_cast<const unsigned char*>(ws.ctrl) + offsetof(cd::control, header);
  impl::template decode_body<float>(policy.stream, c, header, ws.body, d_x.data(), n, ws.own,
                                    ws.ctrl, d_status);
}

} // namespace commpress
