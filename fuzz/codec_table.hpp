// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The codec configurations the fuzzers and the reliability tests exercise: the examples() of
/// every codec of compress/codec_list.hpp, in list order, then those of its rotated codecs, then
/// the configurations of extra_configs (qsgd's Elias body),
/// chosen by each codec to reach every code path of its body layout (list and bitmap indices,
/// per-row selection, narrow value dtypes, tensor/block/column groups, both ranges, both
/// roundings, both sign scales, every element format, full and short rotation windows).
/// Nothing here is counted by hand: a codec added to the list is fuzzed.

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "commpress/commpress.hpp"

namespace commpress::reliability {

namespace detail {
template <class L, class M> struct concat;
template <class... C, class... R> struct concat<codec_list<C...>, codec_list<R...>> {
  using type = codec_list<C..., R...>;
};
} // namespace detail

/// @brief One configuration of codec Q with the Elias body (qsgd's coding), as an examples()
/// list of its own.
template <class Q, std::uint32_t Block, std::uint32_t Levels> struct qsgd_elias_config {
  static constexpr std::array<Q, 1> examples() {
    return {Q{.block = Block, .levels = Levels, .coding = qsgd_coding::elias}};
  }
};

/// @brief Configurations that are no codec's examples(): qsgd's Elias body, one norm per tensor
/// with s = 1 (the sparsest stream) and blocks of 128 with s = 7. They come after the rotated
/// codecs, so the configurations before them keep their ids (and their corpus files).
using extra_configs = codec_list<qsgd_elias_config<qsgd2, 0, 1>, qsgd_elias_config<qsgd8, 128, 7>>;

/// @brief Every configuration's codec type, in configuration order: the codec list's, then its
/// rotated codecs', then extra_configs'.
using fuzzed_codecs =
    detail::concat<detail::concat<all_codecs, rotated_codecs>::type, extra_configs>::type;

/// @brief Number of configurations before extra_configs: the codecs' and the rotated codecs'
/// examples().
inline constexpr std::size_t codec_config_count = [] {
  std::size_t n = 0;
  const auto add = [&](auto t) { n += decltype(t)::type::examples().size(); };
  detail::concat<all_codecs, rotated_codecs>::type::for_each(add);
  return n;
}();

/// @brief Number of configurations `with_config` dispatches over.
inline constexpr std::size_t config_count = [] {
  std::size_t n = 0;
  const auto add = [&](auto t) { n += decltype(t)::type::examples().size(); };
  fuzzed_codecs::for_each(add);
  return n;
}();

/// @brief Whether codec c's payload depends on the context's step (its random choices): random-k
/// unless every stratum holds one element and its values are not stochastically rounded,
/// stochastic rounding (of quantize, or of top_k's kept values), the stochastic block-scaled
/// codecs, the rotated codecs.
template <class C> constexpr bool step_dependent(const C& c) {
  if constexpr (std::is_same_v<C, random_k>) {
    return !(c.count == 0 && c.fraction >= 1.0f) ||
           (c.quantized() && c.value_quantizer.round == rounding::stochastic);
  } else if constexpr (std::is_same_v<C, quantize>) {
    return c.round == rounding::stochastic;
  } else if constexpr (std::is_same_v<C, top_k>) {
    return c.quantized() && c.value_quantizer.round == rounding::stochastic;
  } else if constexpr (block_scaled_codec<C>) {
    return C::stochastic;
  } else if constexpr (is_rotated_v<C>) {
    return true; // the rotation's signs change with the step
  } else {
    return false;
  }
}

namespace detail {
template <class F, class First, class... Rest>
decltype(auto) with_config_of(std::size_t index, F&& f, codec_list<First, Rest...>) {
  constexpr auto examples = First::examples();
  if constexpr (sizeof...(Rest) == 0) {
    return f(examples[index % examples.size()], step_dependent(examples[index % examples.size()]));
  } else {
    if (index < examples.size())
      return f(examples[index], step_dependent(examples[index]));
    return with_config_of(index - examples.size(), f, codec_list<Rest...>{});
  }
}
} // namespace detail

/// @brief Calls f(codec, stochastic) with configuration `index % config_count`; `stochastic` says
/// whether the payload depends on the context's step (step_dependent).
template <class F> decltype(auto) with_config(std::size_t index, F&& f) {
  return detail::with_config_of(index % config_count, f, fuzzed_codecs{});
}

} // namespace commpress::reliability
