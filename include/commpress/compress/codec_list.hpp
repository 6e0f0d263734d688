// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The one list of the codecs commpress ships, in wire-id order. What must cover every codec
/// is driven by it rather than counted by hand: the umbrella header includes this file, the
/// fuzz and reliability tables run each codec's examples() (fuzz/codec_table.hpp), and the
/// tests of the block-scaled kit run every codec of the list that satisfies
/// block_scaled_codec. A new codec is its header, one entry here and its section of
/// docs/wire-format.md; a block-scaled one (compress/scaled.hpp) needs no backend code.

#include <cstddef>
#include <type_traits>

#include "commpress/compress/cast.hpp"
#include "commpress/compress/fp8.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/compress/mx.hpp"
#include "commpress/compress/natural.hpp"
#include "commpress/compress/nvfp4.hpp"
#include "commpress/compress/qsgd.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/compress/random_k.hpp"
#include "commpress/compress/rotated.hpp"
#include "commpress/compress/sign.hpp"
#include "commpress/compress/terngrad.hpp"
#include "commpress/compress/top_k.hpp"

namespace commpress {

/// @brief A list of codec types.
template <class... C> struct codec_list {
  static constexpr std::size_t size = sizeof...(C);
  /// Calls f(std::type_identity<C>{}) for each codec, in order.
  template <class F> static constexpr void for_each(F&& f) { (f(std::type_identity<C>{}), ...); }
};

/// @brief Every codec, one type per wire id.
using all_codecs = codec_list<identity, cast, quantize, top_k, random_k, sign, fp8, mxfp8,
                              mxfp8_e5m2, mxfp4, nvfp4, terngrad, natural, qsgd8, qsgd4, qsgd2>;

/// @brief The rotated codecs (compress/rotated.hpp) the fuzzers, the reliability tests and the
/// Python binding run, after the codecs above: the randomized Hadamard rotation before
/// quantize, sign and MXFP4. They share their inner codec's wire id.
using rotated_codecs = codec_list<rotated<quantize>, rotated<sign>, rotated<mxfp4>>;

namespace detail {

/// Whether the codecs' wire ids are distinct, so that a payload names the codec that decodes
/// it.
template <class... C> constexpr bool distinct_ids(codec_list<C...>) {
  constexpr std::size_t n = sizeof...(C);
  const codec_id ids[n] = {C::id...};
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (ids[i] == ids[j])
        return false;
  return true;
}

} // namespace detail

static_assert(detail::distinct_ids(all_codecs{}), "commpress: two codecs share a wire id");

} // namespace commpress
