// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// cpu::par against cpu::seq: for every codec, the par payload is byte for byte seq's, and par's
// decode, decode_accumulate and roundtrip write seq's bits, whatever the team size and the range
// size, and seq's roundtrip is its decode(encode). Small tensors run with ranges of 64 and 200
// elements so they split too; the 1 Mi-element default grain splits the 3 Mi + 5 tensor into four
// ranges. Configurations cover every input dtype, wire dtype, granularity and rounding, NaN/Inf
// under each non-finite policy; the large sizes a selection of them (the sweep takes seconds per
// size).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/codec_ops.hpp"

namespace cp = commpress;

namespace {

using par_t = cp::cpu::par_t;

/// Small tensors split only with small ranges: 64 elements, and 200 (rounded up to 256) on more
/// threads than this machine's cores.
const par_t small_policies[] = {{.threads = 2, .grain = 64}, {.threads = 3, .grain = 200}, {}};
/// The quantize sweep (every bit width, range, rounding and granularity) on one of them: a fork
/// costs milliseconds when OpenMP's spinning threads share a loaded two-core machine.
const par_t sweep_policies[] = {{.threads = 2, .grain = 64}};
/// 1000003 elements with ranges of 256 and 4096 elements on 1 and 3 threads; 3 Mi + 5 with the
/// default grain (four ranges) on 1 thread, 2 threads and OpenMP's default team.
const par_t mid_policies[] = {{.threads = 1, .grain = 200}, {.threads = 3, .grain = 4096}};
const par_t big_policies[] = {{.threads = 1}, {.threads = 2}, {}};

constexpr std::size_t small_sizes[] = {0, 1, 7, 63, 4099};
constexpr std::size_t mid_size = 1000003;
constexpr std::size_t big_size = (std::size_t{3} << 20) + 5;

/// Values of varied sign and magnitude; with `nonfinite`, a NaN every 4099 elements from 3, a
/// +Inf every 6151 from 5 and a -Inf every 9001 from 8000, so some groups are poisoned and most
/// are not.
std::vector<float> sample(std::size_t n, bool nonfinite, std::uint32_t stream = 1) {
  std::vector<float> x(n);
  const auto key = cp::make_rng_key(17, stream);
  for (std::size_t i = 0; i < n; ++i)
    x[i] =
        (cp::uniform_from_bits(cp::random_u32(key, 0, i)) - 0.45f) * static_cast<float>(1 + i % 61);
  if (nonfinite)
    for (std::size_t i = 0; i < n; ++i) {
      if (i % 4099 == 3)
        x[i] = std::numeric_limits<float>::quiet_NaN();
      if (i % 6151 == 5)
        x[i] = std::numeric_limits<float>::infinity();
      if (i % 9001 == 8000)
        x[i] = -std::numeric_limits<float>::infinity();
    }
  return x;
}

template <class T> bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  // memcmp may not be given the null data() of an empty vector, even for 0 bytes.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0);
}

/// Encodes, decodes (as T and as fp32), accumulates and roundtrips with seq and with each
/// policy, and requires par's bytes and bits to be seq's.
template <class T, class C>
void check(const C& c, std::size_t n, bool nonfinite, cp::nonfinite_policy on_nonfinite,
           std::span<const par_t> policies) {
  const std::vector<float> xf = sample(n, nonfinite);
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = cp::from_float<T>(xf[i]);
  const cp::context ctx{.seed = 5, .step = 3, .tensor_id = 9, .on_nonfinite = on_nonfinite};
  const std::size_t bytes = cp::max_payload_bytes(c, n);
  const std::vector<float> acc0 = sample(n, false, 2);

  std::vector<std::byte> ref(bytes);
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n));
  const auto r =
      cp::encode(cp::cpu::seq, c, ctx, std::span<const T>(x), std::span(ref), std::span(ws));
  std::vector<T> dec_ref(n);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(ref), std::span(dec_ref));
  std::vector<float> decf_ref(n);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(ref), std::span(decf_ref));
  std::vector<float> acc_ref = acc0;
  cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(ref), std::span(acc_ref),
                        0.75f);
  std::vector<float> rt_ref = xf;
  std::size_t rt_bad = 0;
  if constexpr (std::is_same_v<T, float>) {
    // seq's roundtrip is decode(encode): the same values, and the same NaN/Inf count.
    rt_bad = cp::roundtrip(cp::cpu::seq, c, ctx, std::span(rt_ref), std::span(ws)).nonfinite;
    REQUIRE(rt_bad == r.nonfinite);
    REQUIRE(same_bits(rt_ref, decf_ref));
  }

  for (const par_t& p : policies) {
    INFO("n = ", n, ", threads = ", p.threads, ", grain = ", p.grain);
    std::vector<std::byte> out(bytes, std::byte{0xa5}); // par must write every byte
    std::vector<std::byte> pws(cp::workspace_bytes(p, c, n));
    const auto q = cp::encode(p, c, ctx, std::span<const T>(x), std::span(out), std::span(pws));
    REQUIRE(q.bytes == r.bytes);
    REQUIRE(q.nonfinite == r.nonfinite);
    REQUIRE(out == ref);

    std::vector<T> dec(n);
    cp::decode(p, c, std::span<const std::byte>(ref), std::span(dec));
    REQUIRE(same_bits(dec, dec_ref));
    std::vector<float> decf(n);
    cp::decode(p, c, std::span<const std::byte>(ref), std::span(decf));
    REQUIRE(same_bits(decf, decf_ref));
    std::vector<float> acc = acc0;
    cp::decode_accumulate(p, c, std::span<const std::byte>(ref), std::span(acc), 0.75f);
    REQUIRE(same_bits(acc, acc_ref));

    if constexpr (std::is_same_v<T, float>) {
      std::vector<float> rt = xf;
      REQUIRE(cp::roundtrip(p, c, ctx, std::span(rt), std::span(pws)).nonfinite == rt_bad);
      REQUIRE(same_bits(rt, rt_ref));
    }
  }
}

/// check() on clean input under every non-finite policy (fail included) and on input with
/// NaN/Inf under propagate and zero_and_count, small sizes with small ranges.
template <class T, class C> void check_small(const C& c, std::size_t multiple = 1) {
  for (std::size_t size : small_sizes) {
    const std::size_t n = size / multiple * multiple;
    for (auto policy : {cp::nonfinite_policy::fail, cp::nonfinite_policy::propagate,
                        cp::nonfinite_policy::zero_and_count})
      check<T>(c, n, false, policy, small_policies);
    check<T>(c, n, true, cp::nonfinite_policy::propagate, small_policies);
    check<T>(c, n, true, cp::nonfinite_policy::zero_and_count, small_policies);
  }
}

/// check_small() for the quantize sweep: one policy, and the non-finite policies only where they
/// change the bytes (on input with NaN/Inf).
template <class T, class C> void check_sweep(const C& c, std::size_t multiple = 1) {
  for (std::size_t size : small_sizes) {
    const std::size_t n = size / multiple * multiple;
    check<T>(c, n, false, cp::nonfinite_policy::propagate, sweep_policies);
    check<T>(c, n, true, cp::nonfinite_policy::propagate, sweep_policies);
    check<T>(c, n, true, cp::nonfinite_policy::zero_and_count, sweep_policies);
  }
}

/// check() on the large sizes, with NaN/Inf: under propagate and zero_and_count at 1000003
/// elements, under propagate at 3 Mi + 5.
template <class T, class C> void check_big(const C& c, std::size_t multiple = 1) {
  const std::size_t mid = mid_size / multiple * multiple;
  check<T>(c, mid, true, cp::nonfinite_policy::propagate, mid_policies);
  check<T>(c, mid, true, cp::nonfinite_policy::zero_and_count, mid_policies);
  check<T>(c, big_size / multiple * multiple, true, cp::nonfinite_policy::propagate, big_policies);
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("par: the policy cuts fixed ranges, independent of the team size") {
    CHECK(cp::cpu::detail::range_elements(cp::cpu::par) == (std::size_t{1} << 20));
    CHECK(cp::cpu::detail::range_elements(par_t{.grain = 200}) == 256);
    CHECK(cp::cpu::detail::range_elements(par_t{.threads = 7, .grain = 64}) == 64);
    CHECK_FALSE(cp::cpu::detail::splits(cp::cpu::par, (std::size_t{2} << 20) - 1));
    CHECK(cp::cpu::detail::splits(cp::cpu::par, std::size_t{2} << 20));
    CHECK(cp::cpu::detail::group_step(par_t{.grain = 64}, 1000) == 8);
    CHECK(cp::cpu::detail::group_step(cp::cpu::par, 1000) == 1048);
    std::vector<int> owner(1000, 0);
    const std::size_t sum = cp::cpu::detail::parallel_sum(
        par_t{.threads = 3}, owner.size(), 64, [&](std::uint64_t first, std::uint64_t last) {
          for (std::uint64_t i = first; i < last; ++i)
            ++owner[i];
          return static_cast<std::size_t>(last - first);
        });
    CHECK(sum == owner.size());
    for (int o : owner)
      REQUIRE(o == 1);
  }

  TEST_CASE_TEMPLATE("par: identity and cast are byte-identical to seq", T, float, cp::half,
                     cp::bfloat16) {
    check_small<T>(cp::identity{});
    check_big<T>(cp::identity{});
    for (cp::dtype to : {cp::dtype::bf16, cp::dtype::f16}) {
      check_small<T>(cp::cast{.to = to});
      check_big<T>(cp::cast{.to = to});
    }
  }

  TEST_CASE_TEMPLATE("par: sign is byte-identical to seq", T, float, cp::half, cp::bfloat16) {
    const cp::sign configs[] = {
        {},
        {.scale = cp::sign_scale::rms},
        {.granularity = cp::sign_granularity::block, .block = 1024},
        {.granularity = cp::sign_granularity::block, .block = 1000, .scale = cp::sign_scale::rms},
        {.granularity = cp::sign_granularity::block, .block = 3},
        {.granularity = cp::sign_granularity::block, .block = 40000},
    };
    for (const cp::sign& c : configs) {
      check_small<T>(c);
      // Large: one group (lanes), blocks of whole bytes, blocks of several canonical chunks.
      if ((std::is_same_v<T, float> && c.block != 3 && c.block != 1000) || c.block == 0)
        check_big<T>(c);
    }
  }

  TEST_CASE_TEMPLATE("par: quantize is byte-identical to seq", T, float, cp::half, cp::bfloat16) {
    using g = cp::scale_granularity;
    for (unsigned bits = 1; bits <= 8; ++bits)
      for (auto range : {cp::quant_range::symmetric, cp::quant_range::asymmetric})
        for (auto round : {cp::rounding::nearest, cp::rounding::stochastic}) {
          if (range == cp::quant_range::symmetric && bits < 2)
            continue;
          const cp::quantize base{.bits = bits, .range = range, .round = round};
          cp::quantize tensor = base;
          tensor.granularity = g::tensor;
          tensor.group = 0;
          cp::quantize block100 = base;
          block100.group = 100;
          cp::quantize block13 = base; // groups of eight codes straddle several groups
          block13.group = 13;
          cp::quantize column = base;
          column.granularity = g::column;
          column.group = 7;
          check_sweep<T>(base);
          check_sweep<T>(tensor);
          check_sweep<T>(block100);
          check_sweep<T>(block13);
          check_sweep<T>(column, column.group);
        }
    const cp::quantize big[] = {
        {.bits = 4, .granularity = g::block, .group = 1024},
        {.bits = 2, .granularity = g::block, .group = 128, .round = cp::rounding::stochastic},
        {.bits = 3,
         .granularity = g::block,
         .group = 1000,
         .range = cp::quant_range::asymmetric,
         .round = cp::rounding::stochastic},
        {.bits = 8, .granularity = g::tensor, .group = 0},
        {.bits = 5, .granularity = g::column, .group = 96, .range = cp::quant_range::asymmetric},
    };
    for (const cp::quantize& c : big) {
      const std::size_t multiple = c.granularity == g::column ? c.group : 1;
      check_small<T>(c, multiple);
      // 16-bit: the 4-bit blocks (batches of groups) and the tensor-wide scale (one group,
      // its codes a batch of elements at a time), each with a body of many checksum chunks.
      if (std::is_same_v<T, float> || c.bits == 4 || c.granularity == g::tensor)
        check_big<T>(c, multiple);
    }
  }

  TEST_CASE_TEMPLATE("par: random_k and top_k are byte-identical to seq", T, float, cp::half,
                     cp::bfloat16) {
    const cp::random_k rk[] = {
        {},
        {.fraction = 0.1f, .unbiased = true, .values = cp::dtype::bf16},
        {.count = 5, .values = cp::dtype::f16},
        {.fraction = 0.0f},
        {.fraction = 1.0f, .unbiased = true},
    };
    for (const cp::random_k& c : rk) {
      check_small<T>(c);
      if ((std::is_same_v<T, float> && c.count == 0 && c.fraction < 0.5f) ||
          c.values == cp::dtype::bf16)
        check_big<T>(c);
    }
    // top_k forwards to seq: the small sizes check the forwarding.
    const cp::top_k tk[] = {{}, {.fraction = 0.01f, .row_length = 1000, .values = cp::dtype::f16}};
    for (const cp::top_k& c : tk)
      check_small<T>(c, c.row_length == 0 ? 1 : c.row_length);
  }
}
