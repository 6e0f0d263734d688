// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// layer_policy: which tensors of a model go through the compression pipeline and which are
/// sent uncompressed, from the tensor's metadata alone (name, shape, element type), so that
/// every rank decides the same without exchanging anything.
///
/// Every system that compresses gradients hand-rolls these rules: small tensors cost more in
/// headers and launch overhead than they save; biases and normalisation scales (1-D tensors)
/// are few bytes and sensitive; some layers (embeddings, the output layer) are excluded by
/// name; and a configuration that barely shrinks a tensor (PowerSGD's `min_compression_rate`
/// in PyTorch) is not worth its error. The rules are checked in that order and the first that
/// applies names the verdict.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "commpress/core/dtype.hpp"

namespace commpress {

/// @brief What a layer policy knows of a tensor.
struct tensor_info {
  std::string_view name;                ///< the parameter's name, e.g. "layer1.0.conv1.weight"
  std::span<const std::uint64_t> shape; ///< its dimensions (empty for a scalar)
  dtype element = dtype::f32;           ///< the element type it would be sent in uncompressed

  /// Elements: the product of the dimensions (1 for a scalar).
  [[nodiscard]] constexpr std::uint64_t count() const noexcept {
    std::uint64_t n = 1;
    for (std::uint64_t d : shape)
      n *= d;
    return n;
  }
};

/// @brief A layer policy's verdict on one tensor: compress it, or why not.
enum class layer_verdict : std::uint8_t {
  compress = 0,
  too_small,            ///< fewer than min_elements elements
  one_dimensional,      ///< at most one dimension, and compress_1d is false
  excluded,             ///< its name matches an exclude pattern
  low_compression_rate, ///< uncompressed bytes / payload bytes below min_compression_rate
};

namespace detail {

/// Whether `name` matches the glob `pattern`: `*` matches any run of characters (none
/// included), `?` any one character, every other character itself.
constexpr bool glob_match(std::string_view pattern, std::string_view name) noexcept {
  std::size_t p = 0, n = 0;
  std::size_t star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) { // let the last star take one more character
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    ++p;
  return p == pattern.size();
}

} // namespace detail

/// @brief Which tensors are compressed; the others are sent uncompressed (a plain all-reduce).
///
/// The defaults skip tensors of fewer than 1024 elements and 1-D tensors, as
/// `commpress.torch.LayerPolicy` does.
struct layer_policy {
  std::uint64_t min_elements = 1024; ///< tensors with fewer elements are sent uncompressed
  bool compress_1d = false;          ///< 1-D tensors (biases, norms) are compressed only if true
  /// Tensors whose uncompressed bytes over the pipeline's payload bytes fall below this are
  /// sent uncompressed (0: no such rule).
  double min_compression_rate = 0.0;
  std::vector<std::string> exclude{}; ///< glob patterns (`*`, `?`) of names sent uncompressed

  /// @brief The verdict on tensor `t` when its payload would take `payload_bytes` bytes (a
  /// pipeline chosen at run time: pipe.max_payload_bytes(t.count())).
  [[nodiscard]] layer_verdict decide(const tensor_info& t, std::uint64_t payload_bytes) const {
    const std::uint64_t n = t.count();
    if (n < min_elements)
      return layer_verdict::too_small;
    if (t.shape.size() <= 1 && !compress_1d)
      return layer_verdict::one_dimensional;
    for (const std::string& pattern : exclude)
      if (detail::glob_match(pattern, t.name))
        return layer_verdict::excluded;
    if (min_compression_rate > 0.0) {
      const double raw = static_cast<double>(n) * dtype_bytes(t.element);
      if (raw < min_compression_rate * static_cast<double>(payload_bytes))
        return layer_verdict::low_compression_rate;
    }
    return layer_verdict::compress;
  }

  /// @brief The verdict on tensor `t` when compressed with `pipe` (a pipeline<F, C>).
  template <class Pipeline>
  requires requires(const Pipeline& p, std::uint64_t n) { p.max_payload_bytes(n); }
  [[nodiscard]] layer_verdict decide(const Pipeline& pipe, const tensor_info& t) const {
    return decide(t, pipe.max_payload_bytes(t.count()));
  }

  friend bool operator==(const layer_policy&, const layer_policy&) = default;

  /// @brief Whether `t` is compressed with `pipe`.
  template <class Pipeline>
  [[nodiscard]] bool compressed(const Pipeline& pipe, const tensor_info& t) const {
    return decide(pipe, t) == layer_verdict::compress;
  }
};

} // namespace commpress
