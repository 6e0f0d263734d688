// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

/// @file
/// The device entry points of a module built without CUDA: they refuse every call (api.cpp
/// already refuses device arrays before reaching them; these keep the link complete).

#include "binding.hpp"

namespace commpress::py {

namespace {
[[noreturn]] void no_cuda() {
  detail::throw_error(errc::invalid_argument, "python",
                      "this module was built without CUDA (COMMPRESS_PYTHON_CUDA=OFF)");
}
} // namespace

bool has_cuda() {
  return false;
}
std::uint64_t cuda_status_bytes() {
  return 0;
}

template <class C> std::uint64_t cuda_codec_ops<C>::workspace_bytes(const C&, std::uint64_t) {
  no_cuda();
}
template <class C>
void cuda_codec_ops<C>::encode(const policy_ref&, const C&, const context&, const tensor_ref&,
                               bytes, bytes, void*) {
  no_cuda();
}
template <class C>
void cuda_codec_ops<C>::decode(const policy_ref&, const C&, cbytes, const tensor_ref&, bytes,
                               void*) {
  no_cuda();
}
template <class C>
void cuda_codec_ops<C>::decode_accumulate(const policy_ref&, const C&, cbytes, std::span<float>,
                                          float, bytes, void*) {
  no_cuda();
}
template <class C>
void cuda_codec_ops<C>::roundtrip(const policy_ref&, const C&, const context&, std::span<float>,
                                  bytes, void*) {
  no_cuda();
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
