// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// How feedback state is stored between steps: fp32, bf16, or b-bit block-quantized integers
/// with one fp32 scale per block (LoCo keeps its error in 8 bits, algorithms.md 2.2; AQ-SGD's
/// `delta-lowbits` keeps its cache in 4 bits, algorithms.md 4.3).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

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
/// (algorithms.md 5.1). Blocks never straddle rows. 4-bit codes are packed two per byte,
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

  /// store_f32's values in place, rows one after another (fused feedback updates, issue 7).
  [[nodiscard]] std::span<float> values() noexcept requires std::same_as<S, store_f32> {
    return data_;
  }

  /// Writes row r as floats into out[0..row_length).
  void load_row(std::uint64_t r, float* out) const {
    const word* w = data_.data() + r * words_per_row(len_);
    if constexpr (std::same_as<S, store_f32>) {
      for (std::uint64_t j = 0; j < len_; ++j)
        out[j] = w[j];
    } else if constexpr (std::same_as<S, store_bf16>) {
      for (std::uint64_t j = 0; j < len_; ++j)
        out[j] = to_float(bfloat16{w[j]});
    } else {
      const float* sc = scales_.data() + r * scales_per_row(len_);
      for (std::uint64_t j = 0; j < len_; ++j)
        out[j] = detail::mul_rn(static_cast<float>(code_at(w, j)), sc[j / S::block]);
    }
  }

  /// Stores row r from in[0..row_length); the values must be finite.
  void store_row(std::uint64_t r, const float* in) {
    word* w = data_.data() + r * words_per_row(len_);
    if constexpr (std::same_as<S, store_f32>) {
      for (std::uint64_t j = 0; j < len_; ++j)
        w[j] = in[j];
    } else if constexpr (std::same_as<S, store_bf16>) {
      for (std::uint64_t j = 0; j < len_; ++j)
        w[j] = to_bfloat16(in[j]).bits;
    } else {
      float* sc = scales_.data() + r * scales_per_row(len_);
      for (std::uint64_t b = 0; b * S::block < len_; ++b) {
        const std::uint64_t lo = b * S::block;
        const std::uint64_t hi = lo + S::block < len_ ? lo + S::block : len_;
        float amax = 0.0f;
        for (std::uint64_t j = lo; j < hi; ++j)
          amax = detail::max(amax, detail::abs(in[j]));
        const float scale = detail::div_rn(amax, S::qmax);
        sc[b] = scale;
        for (std::uint64_t j = lo; j < hi; ++j) {
          const float q =
              scale > 0.0f ? detail::round_half_even(detail::div_rn(in[j], scale)) : 0.0f;
          set_code(w, j, static_cast<int>(detail::min(detail::max(q, -S::qmax), S::qmax)));
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
  static void set_code(std::uint8_t* w, std::uint64_t j, int q) {
    if constexpr (S::bits == 8) {
      w[j] = static_cast<std::uint8_t>(q);
    } else {
      const int shift = static_cast<int>(4 * (j % 2));
      w[j / 2] = static_cast<std::uint8_t>((w[j / 2] & ~(0xf << shift)) | ((q & 0xf) << shift));
    }
  }

  std::uint64_t rows_ = 0;
  std::uint64_t len_ = 0;
  std::vector<word> data_;
  std::vector<float> scales_;
};

} // namespace commpress
