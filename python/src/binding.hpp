// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The type-erased interface between the nanobind module (module.cpp) and the translation units
/// that instantiate the library's templates, one per codec (codec_<name>.cpp).
///
/// Nothing here includes nanobind: the codec translation units see plain spans and the library's
/// own types, so each compiles only the templates of its codec. module.cpp checks every array
/// (dtype, contiguity, device) before it calls in here, and visits the configuration variants to
/// reach the explicit instantiations below; no codec math lives in the binding.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "commpress/compress/codec_list.hpp"
#include "commpress/core/context.hpp"
#include "commpress/feedback/aq_sgd.hpp"
#include "commpress/feedback/ef.hpp"
#include "commpress/feedback/ef21.hpp"
#include "commpress/feedback/feedback.hpp"
#include "commpress/feedback/loco.hpp"
#include "commpress/feedback/none.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace commpress::py {

/// The std::variant of the codecs of two codec_lists.
template <class L, class M> struct variant_of;
template <class... C, class... R> struct variant_of<codec_list<C...>, codec_list<R...>> {
  using type = std::variant<C..., R...>;
};

/// Every codec configuration the module knows: all of compress/codec_list.hpp, in its order,
/// then its rotated codecs.
using any_codec = variant_of<all_codecs, rotated_codecs>::type;

/// Every feedback configuration: each error storage of loco and aq_sgd is its own C++ type.
using any_feedback = std::variant<none, ef, ef21, loco<store_f32>, loco<store_bf16>,
                                  loco<store_int8>, loco<store_int4>, aq_sgd<store_f32>,
                                  aq_sgd<store_bf16>, aq_sgd<store_int8>, aq_sgd<store_int4>, dgc>;

/// A pipeline<Feedback, Codec> whose two halves are chosen at run time.
struct any_pipeline {
  any_feedback feedback;
  any_codec codec;
  friend bool operator==(const any_pipeline&, const any_pipeline&) = default;
};

/// Whether feedback F keys its state by dataset sample (aq_sgd: its calls take sample ids).
template <class F> inline constexpr bool keyed_by_sample_v = F::id == feedback_id::aq_sgd;

/// The pipeline<F, C> a visitor reached.
template <class F, class C> pipeline<F, C> concrete(const F& f, const C& c) {
  return pipeline<F, C>{f, c};
}

/// Where a call runs: cpu::seq, cpu::par (threads, grain) or cuda::par.on(stream).
struct policy_ref {
  enum class kind : std::uint8_t { seq, par, cuda } k = kind::seq;
  unsigned threads = 0;
  std::uint64_t grain = 0;
  std::uintptr_t stream = 0; ///< a cudaStream_t as an integer (0: the legacy default stream)
  int device = -1;           ///< the CUDA device of the arrays (kind::cuda)
};

/// A contiguous array the module checked: element type, element count, host or device memory.
struct tensor_ref {
  void* data = nullptr;
  std::uint64_t n = 0;
  dtype type = dtype::f32;
};

/// Calls f(span<T>) with the tensor's element type (float, half or bfloat16).
template <class F> decltype(auto) with_elements(const tensor_ref& t, F&& f) {
  switch (t.type) {
  case dtype::f16:
    return f(std::span<half>(static_cast<half*>(t.data), t.n));
  case dtype::bf16:
    return f(std::span<bfloat16>(static_cast<bfloat16*>(t.data), t.n));
  default:
    return f(std::span<float>(static_cast<float*>(t.data), t.n));
  }
}

using bytes = std::span<std::byte>;
using cbytes = std::span<const std::byte>;
using ids_span = std::span<const std::uint64_t>;

/// The codec entry points of codec_ops.hpp (and backend/cuda/codec_ops.cuh) for codec C.
/// Defined in codec_impl.hpp and explicitly instantiated in the codec's translation unit.
template <class C> struct codec_ops {
  static std::uint64_t workspace_bytes(const policy_ref& p, const C& c, std::uint64_t n);
  /// What encode alone needs: on a host, less than workspace_bytes where roundtrip encodes
  /// into the workspace.
  static std::uint64_t encode_workspace_bytes(const policy_ref& p, const C& c, std::uint64_t n);
  static encode_result encode(const policy_ref& p, const C& c, const context& ctx,
                              const tensor_ref& in, bytes out, bytes ws);
  static payload_header decode(const policy_ref& p, const C& c, cbytes payload,
                               const tensor_ref& out, bytes ws);
  static payload_header decode_accumulate(const policy_ref& p, const C& c, cbytes payload,
                                          std::span<float> acc, float weight, bytes ws);
  static encode_result roundtrip(const policy_ref& p, const C& c, const context& ctx,
                                 std::span<float> x, bytes ws);
};

/// The pipeline entry points of pipeline.hpp for pipeline<F, C> on cpu::seq. `state` is the
/// sender state (encode) or receiver state (decode, decode_accumulate) of F; `ids` is used by
/// aq_sgd only.
template <class F, class C> struct pipeline_ops {
  using sender_state = typename F::sender_state;
  using receiver_state = typename F::receiver_state;
  static std::uint64_t max_payload_bytes(const F& f, const C& c, std::uint64_t n);
  static std::uint64_t workspace_bytes(const F& f, const C& c, std::uint64_t n);
  static step_result encode(const F& f, const C& c, sender_state& state, const context& ctx,
                            ids_span ids, const tensor_ref& in, bytes out, bytes ws);
  static decode_result decode(const F& f, const C& c, receiver_state& state, ids_span ids,
                              cbytes payload, const tensor_ref& out, bytes ws);
  static decode_result decode_accumulate(const F& f, const C& c, receiver_state& state,
                                         cbytes payload, std::span<float> acc, float weight,
                                         bytes ws);
};

/// A sender_end<pipeline<F, C>> behind a virtual interface.
class sender_iface {
public:
  virtual ~sender_iface() = default;
  /// sender_end::send (ids: aq_sgd only, empty otherwise).
  virtual cbytes send(ids_span ids, std::span<const float> x) = 0;
  virtual bool& enabled() = 0;
  [[nodiscard]] virtual step_result last() const = 0;
  [[nodiscard]] virtual std::uint64_t step() const = 0;
  [[nodiscard]] virtual std::vector<std::byte> save() const = 0;
  virtual void load(cbytes blob) = 0;
  [[nodiscard]] virtual bool keyed_by_sample() const = 0;
};

/// A receiver_end<pipeline<F, C>> behind a virtual interface.
class receiver_iface {
public:
  virtual ~receiver_iface() = default;
  virtual std::span<const float> receive(cbytes payload, ids_span ids) = 0;
  virtual bool& enabled() = 0;
  [[nodiscard]] virtual decode_result last() const = 0;
  [[nodiscard]] virtual std::uint64_t step() const = 0;
  [[nodiscard]] virtual std::vector<std::byte> save() const = 0;
  virtual void load(cbytes blob) = 0;
  [[nodiscard]] virtual bool keyed_by_sample() const = 0;
};

/// Channel ends of pipeline<F, C> (explicitly instantiated in the codec's translation unit).
template <class F, class C> struct channel_ops {
  static std::unique_ptr<sender_iface> make_sender(const F& f, const C& c, std::uint64_t n,
                                                   const context& base);
  static std::unique_ptr<receiver_iface> make_receiver(const F& f, const C& c, std::uint64_t n,
                                                       const context& base);
};

/// Whether the module was compiled with the CUDA backend (cuda_ops.cu).
bool has_cuda();

} // namespace commpress::py

namespace commpress::py {

/// The codec entry points on device memory, cuda::par.on(stream). Defined in cuda_ops.cu when the
/// module is built with COMMPRESS_PYTHON_CUDA, else in cuda_stub.cpp (they throw). Every call
/// only enqueues work on the stream and never synchronises; data-dependent failures (a corrupted
/// payload) go to the caller's device status word, as in backend/cuda/codec_ops.cuh.
template <class C> struct cuda_codec_ops {
  static std::uint64_t workspace_bytes(const C& c, std::uint64_t n);
  static void encode(const policy_ref& p, const C& c, const context& ctx, const tensor_ref& in,
                     bytes out, bytes ws, void* status);
  static void decode(const policy_ref& p, const C& c, cbytes payload, const tensor_ref& out,
                     bytes ws, void* status);
  static void decode_accumulate(const policy_ref& p, const C& c, cbytes payload,
                                std::span<float> acc, float weight, bytes ws, void* status);
  static void roundtrip(const policy_ref& p, const C& c, const context& ctx, std::span<float> x,
                        bytes ws, void* status);
};

/// Bytes of a cuda::device_status (what a caller allocates for the status word).
std::uint64_t cuda_status_bytes();

} // namespace commpress::py
