// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Pre-faulted, reused benchmark buffers and reproducible inputs.
///
/// Touching fresh memory is very slow on the VMs we measure on (bench/README.md, "Noise on these
/// VMs"), so every buffer is allocated once per size, written in full before timing, and reused.
///
/// Page policy: buffers are 2 MiB aligned and, on Linux, advised MADV_HUGEPAGE before the first
/// touch, so they get transparent huge pages when /sys/kernel/mm/transparent_hugepage/enabled
/// is `always` or `madvise` (page size moves bandwidth noticeably on these VMs, bench/README.md).
/// page_policy() reports what the kernel offered, for the benchmark context.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <span>
#include <string>

#include "commpress/core/rng.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace commpress_bench {

/// Alignment of every buffer: one huge page.
inline constexpr std::size_t huge_page = std::size_t{2} << 20;

struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

/// A byte buffer, huge-page aligned, advised MADV_HUGEPAGE, and faulted in before it is returned.
class buffer {
public:
  buffer() = default;
  explicit buffer(std::size_t bytes) : size_(bytes) {
    const std::size_t rounded = (bytes + huge_page - 1) / huge_page * huge_page;
    void* p = std::aligned_alloc(huge_page, rounded == 0 ? huge_page : rounded);
    if (p == nullptr)
      throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, rounded, MADV_HUGEPAGE); // best effort: without THP the figures use 4 KiB pages
#endif
    std::memset(p, 1, rounded); // fault every page in now, never inside a timed region
    data_.reset(static_cast<std::byte*>(p));
  }
  [[nodiscard]] std::byte* data() const noexcept {
    return data_.get();
  }
  [[nodiscard]] std::size_t size() const noexcept {
    return size_;
  }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept {
    return {data(), size_};
  }
  template <class T> [[nodiscard]] std::span<T> as(std::size_t n) const noexcept {
    return {reinterpret_cast<T*>(data()), n};
  }

private:
  std::unique_ptr<std::byte, free_deleter> data_;
  std::size_t size_ = 0;
};

/// N(0,1)-like fp32 data (sum of four uniforms, centred and scaled), generated once per
/// (size, seed) into a huge-page buffer.
inline std::span<const float> gaussian_input(std::size_t n, std::uint64_t seed = 2026) {
  static std::map<std::pair<std::size_t, std::uint64_t>, buffer> cache;
  auto& slot = cache[{n, seed}];
  if (slot.size() < 4 * n) {
    slot = buffer(4 * n);
    const auto x = slot.as<float>(n);
    const auto key = commpress::make_rng_key(seed, 1);
    for (std::size_t i = 0; i < n; ++i) {
      const auto b = commpress::random_block(key, 0, i);
      float s = 0;
      for (unsigned w = 0; w < 4; ++w)
        s += commpress::uniform_from_bits(b.v[w]);
      x[i] = (s - 2.0f) * 1.7320508f;
    }
  }
  return slot.as<const float>(n);
}

/// A pre-faulted byte buffer of at least `bytes` in slot `slot`, shared by the benchmarks of a
/// run (contents unspecified).
inline std::span<std::byte> scratch(int slot, std::size_t bytes) {
  static std::map<int, buffer> buffers;
  auto& b = buffers[slot];
  if (b.size() < bytes)
    b = buffer(bytes);
  return b.bytes().first(bytes);
}

/// The float view of scratch slot `slot`.
inline std::span<float> scratch_floats(int slot, std::size_t n) {
  return {reinterpret_cast<float*>(scratch(slot, 4 * n).data()), n};
}

/// The transparent-huge-page mode the kernel offers (the bracketed word of
/// /sys/kernel/mm/transparent_hugepage/enabled), or "unknown".
inline std::string page_policy() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line))
    return "unknown";
  const auto open = line.find('[');
  const auto close = line.find(']');
  if (open == std::string::npos || close == std::string::npos)
    return "unknown";
  return "thp=" + line.substr(open + 1, close - open - 1) + ", buffers madvise(MADV_HUGEPAGE)";
}

} // namespace commpress_bench
