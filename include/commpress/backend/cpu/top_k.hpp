// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// CPU implementation of the top-k codec.
///
/// Per row: the keys go into the workspace, std::nth_element finds the k-th largest key t, and
/// one ordered pass keeps every key > t and the first (k - #keys > t) keys == t by index, which
/// is the tie rule of compress/top_k.hpp. O(d) per row. Rows of at least
/// cpu::detail::sampled_top_k_min_row elements, of any element type, first try the
/// sampled-threshold method of detail/top_k_select.hpp, which selects the same set, so writes
/// the same bytes, in one streaming pass, which also writes a bitmap index 16 bits at a time.
/// Rows shorter than that with few kept elements (chunked top-k: 2 of every 64) take
/// top_k_small of the same file, two vector passes with the k best keys of each lane in
/// registers, which also selects the same set. Either way only the kept elements are written: the
/// bitmap is cleared up front and the in-place roundtrip clears the rest of the row in bulk.
///
/// Quantized values: the selection writes every row's kept values as fp32 into the workspace,
/// then the quantize group pipeline (detail/quantize_groups.hpp) encodes them as one dense
/// tensor; decoding reads them back in runs of value_run through cpu::detail::decode_values.
/// The roundtrip then encodes into the workspace and decodes, so it is decode(encode(x)) by
/// construction.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <type_traits>

#include "commpress/backend/cpu/detail/element_io.hpp"
#include "commpress/backend/cpu/detail/element_lanes.hpp"
#include "commpress/backend/cpu/detail/top_k_select.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/compress/top_k.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"

namespace commpress::detail {

template <> struct codec_impl<top_k, cpu::seq_t> {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl).
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = true;

  /// One 32-bit key per element of a row, plus 3 bytes to align the key array inside any span;
  /// with quantized values also every kept value as fp32 (aligned likewise) and, for the
  /// roundtrip, one body.
  static std::uint64_t workspace_bytes(const top_k& c, std::uint64_t n) {
    const std::uint64_t d = c.row_elements(n);
    const std::uint64_t keys = d == 0 ? 0 : 4 * d + 3;
    if (!c.quantized())
      return keys;
    return keys + 4 * c.rows(n) * c.kept(d) + 3 + c.body_bytes(n);
  }

  template <element T>
  static std::size_t encode_body(const cpu::seq_t&, const top_k& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    const std::uint64_t n = in.size();
    const std::uint64_t d = c.row_elements(n);
    const std::uint64_t k = c.kept(d);
    const std::uint64_t rows = c.rows(n);
    const std::uint64_t ib = top_k::index_bytes(d, k);
    const bool bitmap = top_k::uses_bitmap(d, k);
    const unsigned width = top_k::index_width(d);
    // Quantized values go to the workspace as fp32 first, then through the quantizer.
    const dtype vtype = c.quantized() ? dtype::f32 : c.values;
    const std::uint64_t vb = c.quantized() ? 4 : c.value_bytes();
    float* const staged = c.quantized() ? staged_values(c, n, ws) : nullptr;
    unsigned char* const values =
        c.quantized() ? reinterpret_cast<unsigned char*>(staged) : body + rows * ib;
    std::size_t bad = 0;
    for (std::uint64_t r = 0; r < rows; ++r) {
      unsigned char* idx = body + r * ib;
      unsigned char* val = values + r * k * vb;
      if (small_row(d, k)) {
        std::uint32_t index[cpu::detail::small_top_k_max], bits[cpu::detail::small_top_k_max];
        bad += cpu::detail::top_k_small(fp32_row(in.data() + r * d, d, ws), d, k,
                                        ctx.on_nonfinite == nonfinite_policy::zero_and_count, index,
                                        bits);
        write_small(index, bits, k, bitmap, ib, width, vtype, idx, val);
        continue;
      }
      const auto kept = sampled_row(in.data() + r * d, d, k, ctx.on_nonfinite, keys_of(ws), bad,
                                    bitmap ? idx : nullptr, vtype == dtype::f32 ? val : nullptr);
      if (kept.index != nullptr) {
        write_kept(kept, k, bitmap, width, vtype, idx, val);
        continue;
      }
      if (bitmap) // set bit by bit below: clear what the sampled method may have left
        std::memset(idx, 0, ib);
      std::uint64_t j = 0;
      select_row(
          d, k, keys_of(ws),
          [&](std::uint64_t i, std::size_t& count) {
            return screen(to_float(in[r * d + i]), ctx.on_nonfinite, count);
          },
          bad,
          [&](std::uint64_t i, float v) {
            if (bitmap) {
              idx[i / 8] = static_cast<unsigned char>(idx[i / 8] | (1u << (i % 8)));
            } else {
              store_index(idx + j * width, width, i);
            }
            store_value(val + j * vb, vb, encode_as(vtype, v));
            ++j;
          });
    }
    if (c.quantized()) // its non-finite count would count the kept NaN/Inf a second time
      cpu::detail::quantize_groups::encode(
          c.value_quantizer, ctx, std::span<const float>(staged, rows * k), body + rows * ib,
          nullptr, 0, c.value_quantizer.n_groups(rows * k));
    return bad;
  }

  template <element T>
  static void decode_body(const cpu::seq_t&, const top_k& c, const payload_header&,
                          const unsigned char* body, std::span<T> out) {
    check_indices(c, out.size(), body);
    std::fill(out.begin(), out.end(), from_float<T>(0.0f));
    for_each_kept(c, out.size(), body,
                  [&](std::uint64_t i, float v) { out[i] = from_float<T>(v); });
  }

  static void accumulate_body(const cpu::seq_t&, const top_k& c, const payload_header&,
                              const unsigned char* body, std::span<float> acc, float weight) {
    check_indices(c, acc.size(), body);
    for_each_kept(c, acc.size(), body,
                  [&](std::uint64_t i, float v) { acc[i] = add_rn(acc[i], mul_rn(weight, v)); });
  }

  /// In place: the selection pass reads each element before it overwrites it. Quantized values:
  /// encode into the workspace's body, then decode.
  static std::size_t roundtrip(const cpu::seq_t& p, const top_k& c, const context& ctx,
                               std::span<float> x, std::span<std::byte> ws) {
    const std::uint64_t n = x.size();
    if (c.quantized()) {
      const std::uint64_t body_at = workspace_bytes(c, n) - c.body_bytes(n);
      auto* body = reinterpret_cast<unsigned char*>(ws.data() + body_at);
      const std::size_t bad = encode_body(p, c, ctx, std::span<const float>(x), body, ws);
      decode_body(p, c, payload_header{}, body, x);
      return bad;
    }
    const std::uint64_t d = c.row_elements(n);
    const std::uint64_t k = c.kept(d);
    std::size_t bad = 0;
    for (std::uint64_t r = 0; r < c.rows(n); ++r) {
      float* row = x.data() + r * d;
      if (small_row(d, k)) { // the row is read in full first: clear it, then write the kept
        std::uint32_t index[cpu::detail::small_top_k_max], bits[cpu::detail::small_top_k_max];
        bad += cpu::detail::top_k_small(
            row, d, k, ctx.on_nonfinite == nonfinite_policy::zero_and_count, index, bits);
        std::fill(row, row + d, 0.0f);
        for (std::uint64_t j = 0; j < k; ++j)
          row[index[j]] = c.decode_value(c.encode_value(std::bit_cast<float>(bits[j])));
        continue;
      }
      const auto kept = sampled_row(row, d, k, ctx.on_nonfinite, keys_of(ws), bad);
      if (kept.index != nullptr) { // the row was read in full: clear it, then the kept
        std::fill(row, row + d, 0.0f);
        for (std::uint64_t j = 0; j < k; ++j)
          row[kept.index[j]] = c.decode_value(c.encode_value(std::bit_cast<float>(kept.bits[j])));
        continue;
      }
      std::uint64_t next = 0; // first element not written yet
      select_row(
          d, k, keys_of(ws),
          [&](std::uint64_t i, std::size_t& count) {
            return screen(row[i], ctx.on_nonfinite, count);
          },
          bad,
          [&](std::uint64_t i, float v) {
            std::fill(row + next, row + i, 0.0f);
            row[i] = c.decode_value(c.encode_value(v));
            next = i + 1;
          });
      std::fill(row + next, row + d, 0.0f);
    }
    return bad;
  }

private:
  /// Kept values decoded at a time from a quantized value section.
  static constexpr std::uint64_t value_run = 256;

  static std::uint32_t* keys_of(std::span<std::byte> ws) {
    const auto misalign = reinterpret_cast<std::uintptr_t>(ws.data()) % 4;
    return reinterpret_cast<std::uint32_t*>(ws.data() + (4 - misalign) % 4);
  }
  /// The fp32 staging array of quantized kept values, after the keys.
  static float* staged_values(const top_k& c, std::uint64_t n, std::span<std::byte> ws) {
    const std::uint64_t d = c.row_elements(n);
    std::byte* const at = ws.data() + (d == 0 ? 0 : 4 * d + 3);
    const auto misalign = reinterpret_cast<std::uintptr_t>(at) % 4;
    return reinterpret_cast<float*>(at + (4 - misalign) % 4);
  }

  /// Long rows: the sampled-threshold method of detail/top_k_select.hpp (the same selection as
  /// select_row, faster than nth_element over the row: bench/README.md). Nulls when it does not
  /// apply (short rows, k = 0 or d) or declined; the caller then runs select_row. With a
  /// `bitmap`, it is written in full; with fp32 `values`, the kept values go straight there
  /// (see top_k_sampled).
  template <element T>
  static cpu::detail::sampled_top_k sampled_row(const T* row, std::uint64_t d, std::uint64_t k,
                                                nonfinite_policy policy, std::uint32_t* keys,
                                                std::size_t& bad, unsigned char* bitmap = nullptr,
                                                unsigned char* values = nullptr) {
    if (k == 0 || k == d || d < cpu::detail::sampled_top_k_min_row)
      return {nullptr, nullptr};
    return cpu::detail::top_k_sampled(row, d, k, policy == nonfinite_policy::zero_and_count, keys,
                                      bad, bitmap, values);
  }

  /// Whether a row takes detail/top_k_select.hpp's top_k_small: few kept elements of a row too
  /// short for the sampled method (chunked top-k), where the general method's per-row machinery
  /// costs far more than reading the row.
  static bool small_row(std::uint64_t d, std::uint64_t k) {
    return k != 0 && k <= cpu::detail::small_top_k_max &&
           cpu::detail::small_top_k_lists(d, k) <= cpu::detail::small_top_k_lists_fast &&
           d < cpu::detail::sampled_top_k_min_row;
  }

  /// The row as fp32: itself, or fp16/bf16 input converted into the workspace's key array.
  template <element T>
  static const float* fp32_row(const T* p, std::uint64_t d, std::span<std::byte> ws) {
    if constexpr (std::is_same_v<T, float>) {
      return p;
    } else {
      auto* row = reinterpret_cast<float*>(keys_of(ws));
      cpu::detail::widen_elements(p, d, row);
      return row;
    }
  }

  /// Writes a row's index and value sections from top_k_small's arrays.
  static void write_small(const std::uint32_t* index, const std::uint32_t* bits, std::uint64_t k,
                          bool bitmap, std::uint64_t ib, unsigned width, dtype values,
                          unsigned char* idx, unsigned char* val) {
    if (bitmap) {
      std::memset(idx, 0, ib);
      for (std::uint64_t j = 0; j < k; ++j)
        idx[index[j] / 8] = static_cast<unsigned char>(idx[index[j] / 8] | 1u << (index[j] % 8));
    } else if (width == 1) {
      for (std::uint64_t j = 0; j < k; ++j)
        idx[j] = static_cast<unsigned char>(index[j]);
    } else {
      for (std::uint64_t j = 0; j < k; ++j)
        store_index(idx + j * width, width, index[j]);
    }
    if (values == dtype::f32) {
      std::memcpy(val, bits, 4 * k); // little-endian host, as element_io.hpp asserts
    } else {
      for (std::uint64_t j = 0; j < k; ++j)
        store_value(val + 2 * j, 2, encode_as(values, std::bit_cast<float>(bits[j])));
    }
  }

  /// Writes a row's index and value sections from sampled_row's arrays (a bitmap, and values
  /// without `kept.bits`, are already written), in loops of their own: through a per-element
  /// callback, the byte stores (which may alias anything) made the compiler reload the callback's
  /// state for every element (measured in bench/README.md, "Figures behind the code comments").
  static void write_kept(cpu::detail::sampled_top_k kept, std::uint64_t k, bool bitmap,
                         unsigned width, dtype values, unsigned char* idx, unsigned char* val) {
    if (!bitmap && width == 4) {
      std::memcpy(idx, kept.index, 4 * k); // little-endian host, as element_io.hpp asserts
    } else if (!bitmap) {
      for (std::uint64_t j = 0; j < k; ++j)
        store_index(idx + j * width, width, kept.index[j]);
    }
    if (kept.bits == nullptr) // fp32 values: already written
      return;
    for (std::uint64_t j = 0; j < k; ++j)
      store_value(val + 2 * j, 2, encode_as(values, std::bit_cast<float>(kept.bits[j])));
  }

  /// Selects the k of d elements of one row by nth_element over all of its keys. load(i, count)
  /// returns element i screened by the non-finite policy (adding to `count`); visit(i, value)
  /// is called for the k kept elements, in increasing i, and only after every element up to i
  /// has been loaded (the in-place roundtrip relies on it). The row's non-finite elements are
  /// added to `bad`.
  template <class Load, class Visit>
  static void select_row(std::uint64_t d, std::uint64_t k, std::uint32_t* keys, Load&& load,
                         std::size_t& bad, Visit&& visit) {
    std::uint32_t t = 0;    // the k-th largest key
    std::uint64_t ties = 0; // keys == t still to keep
    bool all = k == d, none = k == 0;
    if (!all && !none) {
      std::size_t uncounted = 0;
      for (std::uint64_t i = 0; i < d; ++i)
        keys[i] = top_k::magnitude_key(load(i, uncounted));
      std::nth_element(keys, keys + (k - 1), keys + d, std::greater<>{});
      t = keys[k - 1];
      // Every key > t is now before position k - 1.
      std::uint64_t greater = 0;
      for (std::uint64_t j = 0; j + 1 < k; ++j)
        greater += keys[j] > t ? 1u : 0u;
      ties = k - greater;
    }
    for (std::uint64_t i = 0; i < d; ++i) {
      const float v = load(i, bad);
      const std::uint32_t key = top_k::magnitude_key(v);
      bool keep = all;
      if (!all && !none) {
        keep = key > t || (key == t && ties > 0);
        if (keep && key == t)
          --ties;
      }
      if (keep)
        visit(i, v);
    }
  }

  static void store_index(unsigned char* p, unsigned width, std::uint64_t i) {
    if (width == 1)
      p[0] = static_cast<unsigned char>(i);
    if (width == 2)
      cpu::detail::store_word<std::uint16_t>(p, static_cast<std::uint16_t>(i));
    if (width == 4)
      cpu::detail::store_word<std::uint32_t>(p, static_cast<std::uint32_t>(i));
  }
  static std::uint64_t load_index(const unsigned char* p, unsigned width) {
    if (width == 1)
      return p[0];
    if (width == 2)
      return cpu::detail::load_word<std::uint16_t>(p);
    return cpu::detail::load_word<std::uint32_t>(p);
  }
  static void store_value(unsigned char* p, std::uint64_t vb, std::uint32_t code) {
    if (vb == 4) {
      cpu::detail::store_word<std::uint32_t>(p, code);
    } else {
      cpu::detail::store_word<std::uint16_t>(p, static_cast<std::uint16_t>(code));
    }
  }
  static std::uint32_t load_value(const unsigned char* p, std::uint64_t vb) {
    return vb == 4 ? cpu::detail::load_word<std::uint32_t>(p)
                   : cpu::detail::load_word<std::uint16_t>(p);
  }

  /// Refuses (errc::corrupt) an index section no encoder writes: listed indices that are not
  /// strictly increasing or not below the row length, or a bitmap whose population is not k
  /// or that sets bits past the row. Runs before anything is written, so a hostile payload
  /// with a valid checksum cannot write out of bounds.
  static void check_indices(const top_k& c, std::uint64_t n, const unsigned char* body) {
    const std::uint64_t d = c.row_elements(n);
    const std::uint64_t k = c.kept(d);
    const std::uint64_t ib = top_k::index_bytes(d, k);
    const unsigned width = top_k::index_width(d);
    for (std::uint64_t r = 0; r < c.rows(n); ++r) {
      const unsigned char* idx = body + r * ib;
      if (top_k::uses_bitmap(d, k)) {
        // Eight bytes per count: without a popcount instruction (default x86-64 flags)
        // std::popcount is a library call.
        std::uint64_t pop = 0;
        std::uint64_t b = 0;
        for (; b + 8 <= ib; b += 8)
          pop +=
              static_cast<unsigned>(std::popcount(cpu::detail::load_word<std::uint64_t>(idx + b)));
        for (; b < ib; ++b)
          pop += static_cast<unsigned>(std::popcount(idx[b]));
        const unsigned tail = static_cast<unsigned>(d % 8);
        const bool stray = tail != 0 && (idx[ib - 1] >> tail) != 0;
        COMMPRESS_EXPECTS(pop == k && !stray, errc::corrupt, "top_k",
                          "row " + std::to_string(r) + "'s bitmap does not mark " +
                              std::to_string(k) + " elements of the row");
      } else {
        for (std::uint64_t j = 0; j < k; ++j) {
          const std::uint64_t i = load_index(idx + j * width, width);
          const bool ascending = j == 0 || i > load_index(idx + (j - 1) * width, width);
          COMMPRESS_EXPECTS(i < d && ascending, errc::corrupt, "top_k",
                            "row " + std::to_string(r) +
                                "'s indices are not increasing and below the row length");
        }
      }
    }
  }

  /// Calls visit(element index in the tensor, decoded value) for every kept element, in row
  /// order and, within a row, in index order.
  template <class Visit>
  static void for_each_kept(const top_k& c, std::uint64_t n, const unsigned char* body,
                            Visit&& visit) {
    const std::uint64_t d = c.row_elements(n);
    const std::uint64_t k = c.kept(d);
    const unsigned char* const values = body + c.rows(n) * top_k::index_bytes(d, k);
    if (!c.quantized()) {
      const std::uint64_t vb = c.value_bytes();
      for_each_index(c, n, body, [&](std::uint64_t i, std::uint64_t j) {
        visit(i, c.decode_value(load_value(values + j * vb, vb)));
      });
      return;
    }
    const std::uint64_t total = c.rows(n) * k;
    float run[value_run]; // kept values [run_first, run_last)
    std::uint64_t run_first = 0, run_last = 0;
    for_each_index(c, n, body, [&](std::uint64_t i, std::uint64_t j) {
      if (j >= run_last) {
        run_first = j;
        run_last = std::min(j + value_run, total);
        cpu::detail::decode_values(c.value_quantizer, total, values, run_first, run_last, run);
      }
      visit(i, run[j - run_first]);
    });
  }

  /// Calls visit(element index in the tensor, kept value number j) for every kept element, in
  /// row order and, within a row, in index order (so j counts up from 0).
  template <class Visit>
  static void for_each_index(const top_k& c, std::uint64_t n, const unsigned char* body,
                             Visit&& visit) {
    const std::uint64_t d = c.row_elements(n);
    const std::uint64_t k = c.kept(d);
    const std::uint64_t ib = top_k::index_bytes(d, k);
    const unsigned width = top_k::index_width(d);
    for (std::uint64_t r = 0; r < c.rows(n); ++r) {
      const unsigned char* idx = body + r * ib;
      std::uint64_t j = r * k;
      if (top_k::uses_bitmap(d, k)) {
        for (std::uint64_t b = 0; b < ib; ++b)
          for (unsigned bits = idx[b]; bits != 0; bits &= bits - 1)
            visit(r * d + 8 * b + static_cast<unsigned>(std::countr_zero(bits)), j++);
      } else {
        for (std::uint64_t m = 0; m < k; ++m)
          visit(r * d + load_index(idx + m * width, width), j++);
      }
    }
  }
};

} // namespace commpress::detail
