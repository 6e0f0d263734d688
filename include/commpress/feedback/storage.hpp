// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// How feedback state is stored between steps: fp32, bf16, or b-bit block-quantized integers
/// with one fp32 scale per block (LoCo keeps its error in 8 bits, docs/methods.md 7.2;
/// AQ-SGD's `delta-lowbits` keeps its cache in 4 bits, docs/methods.md 6.3).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "commpress/backend/cpu/detail/reduce.hpp"
#include "commpress/backend/cpu/detail/storage_kernels.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/state_blob.hpp"

namespace commpress {

/// @brief State stored as fp32: exact.
struct store_f32 {
  static constexpr std::uint8_t code = 1;
};

/// @brief State stored as bf16 (round to nearest even): half the memory, 8 significant bits.
struct store_bf16 {
  static constexpr std::uint8_t code = 2;
};

/// @brief State stored as Bits-bit symmetric integers, one fp32 scale per Block elements.
///
/// scale = max|x| / (2^(Bits-1) - 1), q = round_half_even(x / scale), x' = q * scale. The
/// (2^(Bits-1) - 1) convention never clips, so every element is within scale / 2 of its value
/// (docs/methods.md 2.1, 10.5). Blocks never straddle rows. 4-bit codes are packed two per byte,
/// element 2i in the low nibble.
template <int Bits, std::uint32_t Block = 128> struct store_int {
  static_assert(Bits == 4 || Bits == 8, "commpress: store_int supports 4 and 8 bits");
  static_assert(Block > 0 && Block % 2 == 0, "commpress: store_int block must be even");
  static constexpr std::uint8_t code = 3;
  static constexpr int bits = Bits;
  static constexpr std::uint32_t block = Block;
  static constexpr float qmax = static_cast<float>((1 << (Bits - 1)) - 1);
};

/// LoCo's 8-bit error storage (DeepSpeed stores the error 8-bit group-quantized).
using store_int8 = store_int<8, 128>;
/// A 4-bit cache, as AQ-SGD's `delta-lowbits` option.
using store_int4 = store_int<4, 128>;

namespace detail {
template <class S> inline constexpr bool is_store_int = false;
template <int B, std::uint32_t K> inline constexpr bool is_store_int<store_int<B, K>> = true;
} // namespace detail

/// @brief `rows` rows of `row_length` values kept in storage format S.
///
/// Values go in and out a row at a time as floats. A row written and read back gives
/// `storage(x)`: x itself for store_f32, bf16(x) for store_bf16, the block quantization for
/// store_int. Allocates only at construction.
template <class S> class stored_rows {
public:
  using storage_type = S;

  stored_rows() = default;
  stored_rows(std::uint64_t rows, std::uint64_t row_length)
      : rows_(rows), len_(row_length), data_(rows * words_per_row(row_length)),
        scales_(rows * scales_per_row(row_length)) {}

  [[nodiscard]] std::uint64_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::uint64_t row_length() const noexcept { return len_; }
  /// Bytes of memory the stored values take.
  [[nodiscard]] std::uint64_t memory_bytes() const noexcept {
    return data_.size() * sizeof(word) + scales_.size() * sizeof(float);
  }
  /// Per-block scales (store_int only): the storage step of each block.
  [[nodiscard]] std::span<const float> scales() const noexcept { return scales_; }

  /// store_f32's values in place, rows one after another (the fused step of fused_quantize.hpp).
  [[nodiscard]] std::span<float> values() noexcept requires std::same_as<S, store_f32> {
    return data_;
  }

  /// Writes row r as floats into out[0..row_length).
  void load_row(std::uint64_t r, float* out) const { load_range(r, 0, len_, out); }

  /// Stores row r from in[0..row_length); the values must be finite.
  void store_row(std::uint64_t r, const float* in) { store_range(r, 0, len_, in); }

  /// Writes elements [lo, hi) of row r as floats into out[0..hi - lo). For store_int, lo is a
  /// multiple of the block and hi one or the row length (whole blocks).
  void load_range(std::uint64_t r, std::uint64_t lo, std::uint64_t hi, float* out) const {
    const word* w = data_.data() + r * words_per_row(len_);
    if constexpr (std::same_as<S, store_f32>) {
      for (std::uint64_t j = lo; j < hi; ++j)
        out[j - lo] = w[j];
    } else if constexpr (std::same_as<S, store_bf16>) {
      for (std::uint64_t j = lo; j < hi; ++j)
        out[j - lo] = to_float(bfloat16{w[j]});
    } else {
      check_whole_blocks(lo, hi);
      const float* sc = scales_.data() + r * scales_per_row(len_);
      for (std::uint64_t b = lo / S::block; b * S::block < hi; ++b) {
        const std::uint64_t first = b * S::block;
        const std::uint64_t last = std::min<std::uint64_t>(first + S::block, hi);
        const float scale = sc[b];
        if constexpr (S::bits == 8) {
          if (detail::is_finite(scale)) { // the vector loop, when no product can be NaN
            cpu::detail::int8_values(reinterpret_cast<const std::int8_t*>(w + first), last - first,
                                     scale, out + (first - lo));
            continue;
          }
        }
        for (std::uint64_t j = first; j < last; ++j)
          out[j - lo] = detail::mul_rn(static_cast<float>(code_at(w, j)), scale);
      }
    }
  }

  /// Stores elements [lo, hi) of row r from in[0..hi - lo), finite values; for store_int,
  /// whole blocks as in load_range.
  void store_range(std::uint64_t r, std::uint64_t lo, std::uint64_t hi, const float* in) {
    word* w = data_.data() + r * words_per_row(len_);
    if constexpr (std::same_as<S, store_f32>) {
      for (std::uint64_t j = lo; j < hi; ++j)
        w[j] = in[j - lo];
    } else if constexpr (std::same_as<S, store_bf16>) {
      for (std::uint64_t j = lo; j < hi; ++j)
        w[j] = to_bfloat16(in[j - lo]).bits;
    } else {
      check_whole_blocks(lo, hi);
      float* sc = scales_.data() + r * scales_per_row(len_);
      std::int8_t q[S::block];
      // The scales of a group of blocks are formed before their codes: each block's chain of
      // max reduction and two divisions is long, and the groups let those chains overlap.
      constexpr std::uint64_t group = 8;
      const std::uint64_t end_block = detail::ceil_div(hi, std::uint64_t{S::block});
      for (std::uint64_t b0 = lo / S::block; b0 < end_block; b0 += group) {
        const std::uint64_t b1 = std::min(b0 + group, end_block);
        for (std::uint64_t b = b0; b < b1; ++b) {
          const std::uint64_t first = b * S::block;
          const std::uint64_t count = std::min<std::uint64_t>(first + S::block, hi) - first;
          // max |x| as the largest magnitude bit pattern: the same value for finite x.
          const std::uint32_t most = cpu::detail::max_magnitude_bits(in + (first - lo), count);
          sc[b] = detail::div_rn(detail::bits_to_float(most), S::qmax);
        }
        for (std::uint64_t b = b0; b < b1; ++b) {
          const std::uint64_t first = b * S::block;
          const std::uint64_t count = std::min<std::uint64_t>(first + S::block, hi) - first;
          if (sc[b] > 0.0f) {
            quantize_block(in + (first - lo), count, sc[b], q);
          } else {
            std::memset(q, 0, count);
          }
          set_codes(w, first, count, q);
        }
      }
    }
  }

  /// Sets every value to +0 exactly.
  void zero() {
    for (word& v : data_)
      v = 0;
    for (float& s : scales_)
      s = 0.0f;
  }

  /// Multiplies every stored value by c (a loss-scale change). For store_int only the scales
  /// change, as DeepSpeed's LoCo does, so the codes keep their precision.
  void scale_by(float c) {
    if constexpr (std::same_as<S, store_f32>) {
      for (word& v : data_)
        v = detail::mul_rn(v, c);
    } else if constexpr (std::same_as<S, store_bf16>) {
      for (word& v : data_)
        v = to_bfloat16(detail::mul_rn(to_float(bfloat16{v}), c)).bits;
    } else {
      for (float& s : scales_)
        s = detail::mul_rn(s, c);
    }
  }

  /// Appends the storage code, block and shape as size fields.
  void describe(blob_writer& w) const { w.size(S::code).size(block_of()).size(rows_).size(len_); }
  /// The size fields describe() writes for this object.
  void expect(const blob_reader& r) const { r.expect_sizes({S::code, block_of(), rows_, len_}); }
  void save(blob_writer& w) const {
    w.put(std::span<const word>(data_));
    if constexpr (detail::is_store_int<S>)
      w.put(std::span<const float>(scales_));
  }
  /// Reads values saved by save() into this object (call on a copy, then commit).
  void load(blob_reader& r) {
    r.get(std::span<word>(data_));
    if constexpr (detail::is_store_int<S>)
      r.get(std::span<float>(scales_));
  }

  friend bool operator==(const stored_rows&, const stored_rows&) = default;

private:
  using word = std::conditional_t<
      std::same_as<S, store_f32>, float,
      std::conditional_t<std::same_as<S, store_bf16>, std::uint16_t, std::uint8_t>>;

  static constexpr std::uint64_t block_of() {
    if constexpr (detail::is_store_int<S>) {
      return S::block;
    } else {
      return 0;
    }
  }
  static constexpr std::uint64_t words_per_row(std::uint64_t len) {
    if constexpr (detail::is_store_int<S>) {
      return S::bits == 8 ? len : detail::ceil_div(len, 2);
    } else {
      return len;
    }
  }
  static constexpr std::uint64_t scales_per_row(std::uint64_t len) {
    if constexpr (detail::is_store_int<S>) {
      return detail::ceil_div(len, S::block);
    } else {
      return 0;
    }
  }
  static int code_at(const std::uint8_t* w, std::uint64_t j) {
    if constexpr (S::bits == 8) {
      return static_cast<std::int8_t>(w[j]);
    } else {
      const int nib = (w[j / 2] >> (4 * (j % 2))) & 0xf;
      return nib >= 8 ? nib - 16 : nib; // sign-extend the nibble
    }
  }
  /// q[j] = clamp(round_half_even(x[j] / scale), -qmax, qmax) for finite x and scale > 0, with
  /// the plain IEEE operations that div_rn and round_half_even round the same way for finite
  /// values (without their NaN selects, so the loops vectorize).
  ///
  /// A division per element would bound the fused LoCo step, so the quotient comes from
  /// x * (1 / scale) instead: for |x / scale| <= 128 that is within 2^-15 of the rounded quotient
  /// (a relative 2^-24 from each rounding), so unless a product lies within 2^-14 of a
  /// half-integer, it rounds to the same integer. Only a block with such a product (about one
  /// element in 8000) runs the division.
  static void quantize_block(const float* x, std::uint64_t count, float scale, std::int8_t* q) {
    const auto code = [](float v) {
      v = v > -S::qmax ? v : -S::qmax; // detail::max / min, as max and min instructions
      v = v < S::qmax ? v : S::qmax;
      return static_cast<std::int8_t>(v);
    };
    if (scale >= 0x1p-126f) { // a normal scale: 1 / scale is finite and rounded once
      const std::uint32_t farthest = cpu::detail::int_codes(x, count, 1.0f / scale, S::qmax, q);
      if (detail::bits_to_float(farthest) <= 0.5f - 0x1p-14f)
        return;
    }
    for (std::uint64_t j = 0; j < count; ++j)
      q[j] = code((x[j] / scale + detail::round_magic) - detail::round_magic);
  }

  /// Writes codes q[0..count) of elements first.. (first even): bytes, or nibble pairs.
  static void set_codes(std::uint8_t* w, std::uint64_t first, std::uint64_t count,
                        const std::int8_t* q) {
    if constexpr (S::bits == 8) {
      std::memcpy(w + first, q, count);
    } else {
      for (std::uint64_t j = 0; j + 1 < count; j += 2)
        w[(first + j) / 2] = static_cast<std::uint8_t>((q[j] & 0xf) | (q[j + 1] & 0xf) << 4);
      if (count % 2 != 0) { // the row's odd last element: its byte's high nibble stays
        std::uint8_t& last = w[(first + count - 1) / 2];
        last = static_cast<std::uint8_t>((last & 0xf0) | (q[count - 1] & 0xf));
      }
    }
  }
  void check_whole_blocks(std::uint64_t lo, std::uint64_t hi) const {
    COMMPRESS_EXPECTS(
        lo % S::block == 0 && lo <= hi && hi <= len_ && (hi % S::block == 0 || hi == len_),
        errc::invalid_argument, "stored_rows", "a range of store_int must cover whole blocks");
  }

  std::uint64_t rows_ = 0;
  std::uint64_t len_ = 0;
  std::vector<word> data_;
  std::vector<float> scales_;
};

} // namespace commpress
