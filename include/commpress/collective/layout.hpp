// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What every compressed collective shares (docs/methods.md section 9, docs/collectives.md):
/// the per-codec aggregation trait, the averaging convention, the chunk layout of the sharded
/// path, the pipelines a collective accepts, and the carving of one caller-owned workspace.

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/collective/payload_length.hpp"
#include "commpress/comm/communicator.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/compress/random_k.hpp"
#include "commpress/compress/rotated.hpp"
#include "commpress/compress/scaled.hpp"
#include "commpress/compress/sign.hpp"
#include "commpress/compress/top_k.hpp"
#include "commpress/core/concepts.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/format/header.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace commpress {

static_assert(std::endian::native == std::endian::little,
              "commpress collectives read payload bodies in place: little-endian hosts only");

/// @brief How the messages of a codec can be combined across ranks (docs/methods.md 9.1-9.2).
enum class aggregation : std::uint8_t {
  sum,    ///< closed under addition: the value arrays of all ranks are added by all-reduce
  gather, ///< the payloads are all-gathered and each rank decodes all of them
};

/// @brief The aggregation a codec supports. Every codec supports `gather` (and the sharded
/// reduce-scatter path); this names the cheaper one.
///
/// - identity: sum (a plain float all-reduce).
/// - random_k: sum. Ranks that encode with the same (seed, tensor_id, step) keep the same indices,
///   so their k values add element-wise (docs/methods.md 9.2). The values travel as fp32
///   whatever the codec's wire dtype: a sum of fp16 values is not an fp16 value, nor a sum of
///   quantized values (value_quantizer) a quantized one, so those are decoded before the sum.
/// - cast (fp16/bf16): gather. The communicator concept sums only float and double, and
///   decoding to float before an all-reduce would send fp32 bytes: no compression. Use the
///   sharded path instead, which moves 2(N-1)/N * 2 bytes per element.
/// - top_k, sign, quantize: gather (each rank has its own indices or scales).
template <class Codec> struct codec_aggregation {
  static constexpr aggregation value = aggregation::gather;
};
template <> struct codec_aggregation<identity> {
  static constexpr aggregation value = aggregation::sum;
};
template <> struct codec_aggregation<random_k> {
  static constexpr aggregation value = aggregation::sum;
};

/// @brief True when the codec's messages can be combined by a plain all-reduce.
template <class Codec>
inline constexpr bool sum_compatible_v = codec_aggregation<Codec>::value == aggregation::sum;

/// @brief Whether a collective returns the mean over ranks (applied exactly once, at the
/// point of aggregation; docs/methods.md 9.4) or the plain sum.
enum class scaling : std::uint8_t { mean, sum };

/// @brief A pipeline a collective can run: its receiver keeps no state (feedback none, ef or
/// loco), so any rank can decode any rank's payload with the codec alone.
template <class P>
concept collective_pipeline = std::same_as<typename P::receiver_state, no_state> &&
    requires(const P& p, std::uint64_t n) {
  { p.max_payload_bytes(n) } -> std::convertible_to<std::uint64_t>;
  { p.workspace_bytes(n) } -> std::convertible_to<std::uint64_t>;
  { p.can_implement(n) } -> std::same_as<status>;
  p.make_state(n);
};

/// @brief The sender state type of a pipeline (its error-feedback buffers).
template <class P>
using collective_state_t = decltype(std::declval<const P&>().make_state(std::uint64_t{0}));

/// @brief What one collective call did on this rank.
struct collective_result {
  std::size_t payload_bytes = 0; ///< compressed bytes this rank produced (all its payloads)
  std::size_t wire_bytes = 0;    ///< bytes this rank sends to its peers under the
                                 ///< bandwidth-optimal schedule (docs/collectives.md)
  std::size_t nonfinite = 0;     ///< NaN/Inf elements in this rank's input
  std::size_t held = 0;          ///< feedback state elements kept because of a NaN/Inf update
};

/// @brief The elements a chunk of the sharded path must be a multiple of, so that a codec's
/// groups never straddle a chunk boundary: quantize block/column `group`, sign `block`, top_k
/// `row_length`, a block-scaled codec's block, a rotated codec's window and its inner codec's
/// alignment (their least common multiple); 1 otherwise (a per-tensor scale becomes one scale
/// per chunk).
template <class Codec> constexpr std::uint64_t chunk_alignment(const Codec& c) noexcept {
  if constexpr (block_scaled_codec<Codec>) {
    return c.block_length() == 0 ? 1 : c.block_length();
  } else if constexpr (std::same_as<Codec, quantize>) {
    return c.granularity == scale_granularity::tensor || c.group == 0 ? 1 : c.group;
  } else if constexpr (std::same_as<Codec, sign>) {
    return c.granularity == sign_granularity::block && c.block != 0 ? c.block : 1;
  } else if constexpr (std::same_as<Codec, top_k>) {
    return c.row_length == 0 ? 1 : c.row_length;
  } else if constexpr (is_rotated_v<Codec>) {
    return std::lcm(c.window(), chunk_alignment(c.inner)); // whole windows and inner groups
  } else {
    return 1;
  }
}

/// @brief How the sharded path cuts n elements over `ranks` owners.
///
/// chunk = ceil(ceil(n / ranks) / align) * align; owner j holds [j * chunk, min((j+1) * chunk,
/// n)). The last non-empty chunk may be short and trailing chunks may be empty (n = 5 on 4
/// ranks: 2, 2, 1, 0). Each chunk is encoded as its own payload, so nothing is padded inside a
/// payload; payload slots of the all-to-all and all-gather are padded with zero bytes to the
/// largest chunk payload (for variable-length payloads, to the longest payload of the call).
struct chunk_layout {
  std::uint64_t n = 0;     ///< elements of the whole tensor
  int ranks = 1;           ///< owners
  std::uint64_t chunk = 0; ///< elements of every full chunk

  /// @brief The layout for n elements on `ranks` owners with chunks a multiple of `align`.
  static chunk_layout make(std::uint64_t n, int ranks, std::uint64_t align = 1) {
    COMMPRESS_EXPECTS(ranks >= 1, errc::invalid_argument, "collective", "ranks must be >= 1");
    COMMPRESS_EXPECTS(align >= 1, errc::invalid_argument, "collective", "alignment must be >= 1");
    const std::uint64_t even = detail::ceil_div(n, static_cast<std::uint64_t>(ranks));
    return {n, ranks, detail::ceil_div(even, align) * align};
  }
  /// @brief First element of chunk j (clamped to n).
  [[nodiscard]] constexpr std::uint64_t offset(int j) const noexcept {
    return std::min(n, static_cast<std::uint64_t>(j) * chunk);
  }
  /// @brief Elements of chunk j (0 for trailing empty chunks).
  [[nodiscard]] constexpr std::uint64_t length(int j) const noexcept {
    return std::min(n, offset(j) + chunk) - offset(j);
  }
};

namespace detail {

/// Bump allocator over one caller workspace: regions are 64-byte aligned relative to the
/// workspace start, which must itself be 4-byte aligned (std::vector<std::byte> is).
/// The same sequence of `take` calls sizes the workspace (on an empty span) and carves it.
class ws_carver {
public:
  explicit ws_carver(std::span<std::byte> ws = {}) : ws_(ws) {}

  std::span<std::byte> take(std::uint64_t bytes) {
    const std::uint64_t off = align_up(used_);
    used_ = off + bytes;
    if (ws_.empty())
      return {};
    return ws_.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(bytes));
  }
  std::span<float> take_floats(std::uint64_t n) {
    const std::span<std::byte> b = take(4 * n);
    return {reinterpret_cast<float*>(b.data()), b.size() / 4};
  }
  [[nodiscard]] std::uint64_t used() const noexcept { return align_up(used_); }

private:
  std::span<std::byte> ws_;
  std::uint64_t used_ = 0;
};

/// Checks the caller's workspace against the plan's size and alignment.
inline void check_workspace(std::span<std::byte> ws, std::uint64_t need, const char* who) {
  COMMPRESS_EXPECTS(ws.size() >= need, errc::buffer_too_small, "collective",
                    std::string(who) + ": workspace holds " + std::to_string(ws.size()) +
                        " bytes, the plan needs " + std::to_string(need));
  COMMPRESS_EXPECTS(reinterpret_cast<std::uintptr_t>(ws.data()) % 4 == 0, errc::invalid_argument,
                    "collective", std::string(who) + ": workspace must be 4-byte aligned");
}

/// Checks that the communicator has the world size the plan was made for.
template <class Comm> void check_world(const Comm& comm, int ranks, const char* who) {
  COMMPRESS_EXPECTS(static_cast<int>(comm.size()) == ranks, errc::size_mismatch, "collective",
                    std::string(who) + ": plan made for " + std::to_string(ranks) +
                        " ranks, communicator has " + std::to_string(comm.size()));
}

/// Checks one span's element count.
inline void check_count(std::uint64_t got, std::uint64_t want, const char* who, const char* what) {
  COMMPRESS_EXPECTS(got == want, errc::size_mismatch, "collective",
                    std::string(who) + ": " + what + " has " + std::to_string(got) +
                        " elements, expected " + std::to_string(want));
}

/// Throws when a pipeline cannot run on n elements.
template <class P> void check_pipeline(const P& pipe, std::uint64_t n, const char* who) {
  const status s = pipe.can_implement(n);
  COMMPRESS_EXPECTS(s, s.code, "collective", std::string(who) + ": " + s.message);
}

/// `out[i] = out[i] * w` with one rounding (mean scaling), skipped for w == 1.
inline void scale_in_place(std::span<float> out, float w) {
  if (w == 1.0f)
    return;
  for (float& v : out)
    v = mul_rn(v, w);
}

/// The weight each rank's contribution gets: 1/N (mean) or 1 (sum).
inline float rank_weight(scaling s, int ranks) {
  return s == scaling::mean ? 1.0f / static_cast<float>(ranks) : 1.0f;
}

} // namespace detail
} // namespace commpress
