// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// The block-scaled codecs (compress/scaled.hpp: fp8, mxfp8, mxfp8_e5m2, mxfp4, nvfp4, terngrad,
// natural, qsgd) through
// the kit's CPU backend (backend/cpu/scaled.hpp):
// - every codec of compress/codec_list.hpp that satisfies block_scaled_codec, every example
//   configuration: the payload equals a body built here from the codec's per-group and
//   per-element members and the layout of docs/wire-format.md (tensor scale, group scales,
//   packed codes), byte for byte, and decodes element by element to decode_value;
// - cpu::par writes and reads the same bytes as cpu::seq;
// - each codec's conventions: scales as docs/methods.md section 12 defines them, its error
//   bound, no saturation where the scale rule promises none, no non-finite output for finite
//   input up to the float maximum, all-zero and constant groups, NaN/Inf under each policy;
// - bad input: foreign codecs, truncated and corrupted payloads.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/scaled.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/compress/codec_list.hpp"
#include "commpress/format/bit_packing.hpp"
#include "streamed_output_checks.hpp"

namespace cp = commpress;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float quiet_nan = std::numeric_limits<float>::quiet_NaN();

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// Mostly smooth values over several magnitudes, with zeros, ties, denormals and a few values
/// near the float maximum when `extreme`.
std::vector<float> sample(std::size_t n, std::uint32_t seed, bool extreme = false) {
  std::vector<float> x(n);
  const cp::rng_key key = cp::make_rng_key(seed, 3);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t r = cp::random_u32(key, 0, i);
    const float u = cp::uniform_from_bits(r) - 0.5f;
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    x[i] = u * scale;
    if (r % 29 == 0)
      x[i] = 0.0f;
    if (r % 31 == 0)
      x[i] = -0.0f;
    if (r % 37 == 0)
      x[i] = 1e-41f;
  }
  if (extreme && n > 3) {
    x[1] = std::numeric_limits<float>::max();
    x[2] = -3.3e38f;
  }
  return x;
}

/// The context every encode_vec call uses; its key and step are a stochastic codec's draws.
constexpr cp::context encode_context{.seed = 1, .step = 2};
const cp::rng_key encode_key = encode_context.key();
constexpr std::uint64_t encode_step = encode_context.step;

template <class C, class T>
std::vector<std::byte> encode_vec(const auto& policy, const C& c, const std::vector<T>& x,
                                  cp::nonfinite_policy on = cp::nonfinite_policy::propagate,
                                  std::size_t* nonfinite = nullptr) {
  std::vector<std::byte> p(cp::max_payload_bytes(c, x.size()), std::byte{0xa5});
  std::vector<std::byte> ws(cp::workspace_bytes(policy, c, x.size()));
  cp::context ctx = encode_context;
  ctx.on_nonfinite = on;
  const auto r = cp::encode(policy, c, ctx, std::span<const T>(x), std::span(p), std::span(ws));
  if (nonfinite != nullptr)
    *nonfinite = r.nonfinite;
  return p;
}

template <class C>
std::vector<float> decode_vec(const auto& policy, const C& c, const std::vector<std::byte>& p,
                              std::size_t n) {
  std::vector<float> y(n, 42.0f);
  cp::decode(policy, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

/// The largest finite |x| of x[first, last) and whether it holds a NaN or Inf.
struct group_stats {
  float amax = 0.0f;
  bool poisoned = false;
};
group_stats stats(const std::vector<float>& x, std::size_t first, std::size_t last) {
  group_stats s;
  for (std::size_t i = first; i < last; ++i) {
    if (!std::isfinite(x[i]))
      s.poisoned = true;
    else
      s.amax = std::max(s.amax, std::fabs(x[i]));
  }
  return s;
}

template <class U> void put_le(std::vector<std::byte>& body, std::size_t at, U v) {
  std::memcpy(body.data() + at, &v, sizeof v);
}

/// What docs/wire-format.md says a block-scaled codec writes for x (propagate), built from the
/// codec's members: the body, and the value each element decodes to.
struct expected_payload {
  std::vector<std::byte> body;
  std::vector<float> decoded;
};
template <class C> expected_payload expected_body(const C& c, const std::vector<float>& x) {
  const std::size_t n = x.size();
  std::vector<std::byte> body(c.body_bytes(n));
  std::vector<float> decoded(n);
  if (n == 0)
    return {body, decoded};
  const std::size_t len = c.block_length() == 0 ? n : c.block_length();
  const std::size_t groups = (n + len - 1) / len;
  typename C::tensor_scale t{};
  std::size_t at = 0;
  if constexpr (std::is_same_v<typename C::tensor_scale, float>) {
    t = c.make_tensor_scale(stats(x, 0, n).amax);
    put_le(body, 0, t);
    at = 4;
  }
  std::vector<std::uint32_t> codes(n);
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t first = g * len, last = std::min(n, first + len);
    const group_stats st = stats(x, first, last);
    cp::group_statistics g_st{.amax = st.amax, .count = last - first};
    if (c.needs_norm())
      g_st.l2_norm = cp::scaled::l2_norm_from_sum(
          cp::canonical_chunked_sum(last - first, [&](std::uint64_t i) {
            return static_cast<double>(x[first + i]) * x[first + i];
          }));
    const typename C::scale s = st.poisoned ? C::poisoned_scale : c.make_scale(g_st, t);
    put_le(body, at + g * sizeof(s), s);
    for (std::size_t i = first; i < last; ++i) {
      if constexpr (C::stochastic)
        codes[i] = st.poisoned ? 0u
                               : c.encode_value(x[i], c.make_encoder(s, t),
                                                cp::random_u32(encode_key, encode_step, i));
      else
        codes[i] = st.poisoned ? 0u : c.encode_value(x[i], c.make_encoder(s, t));
      decoded[i] = c.decode_value(codes[i], c.make_decoder(s, t));
    }
  }
  auto* out =
      reinterpret_cast<unsigned char*>(body.data()) + at + groups * sizeof(typename C::scale);
  for (std::size_t i = 0; i < n; i += 8)
    cp::detail::pack_group(codes.data() + i, static_cast<unsigned>(std::min<std::size_t>(8, n - i)),
                           C::code_bits, out + i / 8 * C::code_bits);
  return {body, decoded};
}

/// Calls f(codec) for every example configuration of every block-scaled codec in the list.
template <class F> void for_each_scaled_config(F&& f) {
  cp::all_codecs::for_each([&](auto t) {
    using C = typename decltype(t)::type;
    if constexpr (cp::block_scaled_codec<C>) {
      for (const C& c : C::examples())
        f(c);
    }
  });
}

/// Half the spacing of format f's values around |y| (y scaled into the format's range): the
/// largest rounding error of to_minifloat for |y| at most the largest finite value.
double half_spacing(cp::minifloat f, double y) {
  const auto fmt = cp::detail::format_of(f);
  const int min_exp = 1 - fmt.bias;
  const int e = std::max(min_exp, static_cast<int>(std::floor(std::log2(std::max(y, 1e-300)))));
  return std::ldexp(0.5, e - static_cast<int>(fmt.mantissa_bits));
}

const cp::cpu::par_t par_small{.threads = 3, .grain = 64};

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("scaled: every block-scaled codec writes the documented body, byte for byte") {
    int configs = 0;
    const auto check_config = [&](const auto& c) {
      // 40000: more than 1024 groups of 16 or 32, where a one-byte scale's encoders and
      // decoders come from a table.
      for (const std::size_t n : {0u, 1u, 5u, 15u, 16u, 17u, 31u, 32u, 33u, 100u, 1000u, 40000u}) {
        CAPTURE(n);
        if (!c.can_implement(n))
          continue;
        for (const bool extreme : {false, true}) {
          std::vector<float> x = sample(n, static_cast<std::uint32_t>(n), extreme);
          const std::vector<std::byte> p = encode_vec(cp::cpu::seq, c, x);
          REQUIRE(p.size() == 64 + c.body_bytes(n));
          const expected_payload want = expected_body(c, x);
          CHECK(std::equal(p.begin() + 64, p.end(), want.body.begin(), want.body.end()));
          // Each element decodes to decode_value of its code with its group's decoder.
          const std::vector<float> y = decode_vec(cp::cpu::seq, c, p, n);
          for (std::size_t i = 0; i < n; ++i) {
            CAPTURE(i);
            CHECK(bits(y[i]) == bits(want.decoded[i]));
            CHECK(std::isfinite(y[i])); // finite input, up to the float maximum
          }
        }
      }
    };
    for_each_scaled_config([&](const auto& c) {
      ++configs;
      check_config(c);
    });
    // fp8 (3 examples), mxfp8, mxfp8_e5m2, mxfp4, nvfp4, terngrad (3), natural (3), qsgd8,
    // qsgd4 and qsgd2 (3 each)
    CHECK(configs == 22);
    // Groups of 65 and 67: the 4- and 2-bit codes of every other group start inside a byte, so
    // their stochastic codes, computed 64 at a time, are packed one by one.
    check_config(cp::qsgd4{.block = 65});
    check_config(cp::terngrad{.block = 67});
  }

  TEST_CASE("scaled: cpu::par writes and reads the bytes of cpu::seq, f32, f16 and bf16") {
    for_each_scaled_config([&](const auto& c) {
      // The last size spans five chunks of a norm's canonical sum (core/canonical_sum.hpp), whose
      // statistics are taken chunk by chunk: its NaN is in the fourth.
      for (const std::size_t n : {1000u, 4099u, 20000u, 5u * 32768u + 77u}) {
        if (!c.can_implement(n))
          continue;
        std::vector<float> x = sample(n, 7, true);
        x[n * 7 / 10] = quiet_nan; // a poisoned group somewhere in the middle
        for (const auto on :
             {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
          std::size_t bad_seq = 0, bad_par = 0;
          const auto p = encode_vec(cp::cpu::seq, c, x, on, &bad_seq);
          const auto q = encode_vec(par_small, c, x, on, &bad_par);
          CHECK(p == q);
          CHECK(bad_seq == 1);
          CHECK(bad_par == 1);
          const auto a = decode_vec(cp::cpu::seq, c, p, n);
          const auto b = decode_vec(par_small, c, p, n);
          CHECK(std::memcmp(a.data(), b.data(), 4 * n) == 0);
          std::vector<float> acc_seq(n, 1.0f), acc_par(n, 1.0f);
          cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc_seq),
                                0.5f);
          cp::decode_accumulate(par_small, c, std::span<const std::byte>(p), std::span(acc_par),
                                0.5f);
          CHECK(std::memcmp(acc_seq.data(), acc_par.data(), 4 * n) == 0);
        }
        // Half-precision inputs: the bytes of their values widened to f32 (but the dtype byte).
        std::vector<cp::half> h(n);
        std::vector<cp::bfloat16> b(n);
        std::vector<float> hx(n), bx(n);
        for (std::size_t i = 0; i < n; ++i) {
          h[i] = cp::to_half(x[i] / 1e34f);
          b[i] = cp::to_bfloat16(x[i]);
          hx[i] = cp::to_float(h[i]);
          bx[i] = cp::to_float(b[i]);
        }
        const auto ph = encode_vec(par_small, c, h), pf = encode_vec(cp::cpu::seq, c, hx);
        CHECK(std::equal(ph.begin() + 64, ph.end(), pf.begin() + 64, pf.end()));
        const auto pb = encode_vec(cp::cpu::seq, c, b), pg = encode_vec(par_small, c, bx);
        CHECK(std::equal(pb.begin() + 64, pb.end(), pg.begin() + 64, pg.end()));
      }
    });
  }

  TEST_CASE("scaled: decoding into f16 and bf16 stores from_float of each fp32 value") {
    // Values past f16's range (near the float maximum), in its subnormal range (a group of small
    // values) and NaN (a poisoned group): each must round as to_half and to_bfloat16 do.
    int nan = 0, half_inf = 0, half_subnormal = 0;
    for_each_scaled_config([&](const auto& c) {
      for (const std::size_t n : {1000u, 4099u}) {
        if (!c.can_implement(n))
          continue;
        CAPTURE(n);
        std::vector<float> x = sample(n, 11, true);
        for (std::size_t i = n / 4; i < n / 4 + 256; ++i)
          x[i] *= 1e-6f;
        x[n / 2] = quiet_nan;
        const auto p = encode_vec(cp::cpu::seq, c, x);
        const std::vector<float> y = decode_vec(cp::cpu::seq, c, p, n);
        std::vector<cp::half> yh(n);
        std::vector<cp::bfloat16> yb(n);
        cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(yh));
        cp::decode(par_small, c, std::span<const std::byte>(p), std::span(yb));
        for (std::size_t i = 0; i < n; ++i) {
          CAPTURE(i);
          CHECK(yh[i].bits == cp::to_half(y[i]).bits);
          CHECK(yb[i].bits == cp::to_bfloat16(y[i]).bits);
          nan += std::isnan(y[i]) ? 1 : 0;
          half_inf += (yh[i].bits & 0x7fffu) == 0x7c00u ? 1 : 0;
          half_subnormal += (yh[i].bits & 0x7c00u) == 0 && (yh[i].bits & 0x3ffu) != 0 ? 1 : 0;
        }
      }
    });
    CHECK(nan > 100);
    CHECK(half_inf > 10);
    CHECK(half_subnormal > 100);
  }

  TEST_CASE("scaled: any scales and codes, NaN and Inf scales included, decode to decode_value "
            "bit for bit (NaN canonical, as on CUDA)") {
    const float float_scales[] = {cp::detail::bits_to_float(0x7fa00001u),
                                  cp::detail::bits_to_float(0xffc00123u),
                                  inf,
                                  -inf,
                                  0.0f,
                                  -0.0f,
                                  1.5f,
                                  3e38f,
                                  1e-41f};
    for_each_scaled_config([&](const auto& c) {
      using C = std::decay_t<decltype(c)>;
      if constexpr (requires { c.variable_body(); })
        if (c.variable_body())
          return;
      const std::size_t n = 1000;
      const std::size_t groups = cp::scaled::n_groups(c, n);
      const cp::rng_key key = cp::make_rng_key(17, 4);
      // As many runs as float scales, so that a one-group tensor meets each of them.
      for (std::uint32_t run = 0; run < std::size(float_scales); ++run) {
        auto p = encode_vec(cp::cpu::seq, c, sample(n, 9));
        auto* body = reinterpret_cast<unsigned char*>(p.data()) + cp::format::header_bytes;
        typename C::tensor_scale t{};
        if constexpr (cp::scaled::has_tensor_scale<C>) {
          t = float_scales[(run * 2) % std::size(float_scales)];
          std::memcpy(body, &t, 4);
        }
        std::vector<typename C::scale> scale(groups);
        for (std::size_t g = 0; g < groups; ++g) {
          if constexpr (std::is_same_v<typename C::scale, float>)
            scale[g] = float_scales[(g + run) % std::size(float_scales)];
          else
            scale[g] = static_cast<typename C::scale>(g * 37 + run * 61);
          std::memcpy(body + cp::scaled::scale_offset<C>(g), &scale[g], sizeof scale[g]);
        }
        unsigned char* codes = body + cp::scaled::codes_offset(c, n);
        for (std::size_t b = 0; b < cp::detail::packed_bytes(n, C::code_bits); ++b)
          codes[b] = static_cast<unsigned char>(cp::random_u32(key, run, b));
        cp::format::seal(std::span(p), c.body_bytes(n));
        const auto y = decode_vec(cp::cpu::seq, c, p, n);
        const std::size_t len = c.block_length() == 0 ? n : c.block_length();
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const float want = c.decode_value(cp::detail::unpack_one(codes, i, C::code_bits),
                                            c.make_decoder(scale[i / len], t));
          mismatches += bits(y[i]) != bits(want);
        }
        CHECK(mismatches == 0);
      }
    });
  }

  TEST_CASE("scaled: decode_accumulate adds weight * value rounded once, NaN canonical; a large "
            "output on a cache line (non-temporal stores) gets the values of any other") {
    for_each_scaled_config([&](const auto& c) {
      const std::size_t n = 4099;
      std::vector<float> x = sample(n, 5, true);
      x[700] = quiet_nan; // a poisoned group: NaN values
      const auto p = encode_vec(cp::cpu::seq, c, x);
      const auto y = decode_vec(cp::cpu::seq, c, p, n);
      std::vector<float> acc = sample(n, 6);
      for (std::size_t i = 3; i < n; i += 101) // NaN accumulators with payloads
        acc[i] = cp::detail::bits_to_float(i % 2 ? 0x7fa00001u : 0xffc00123u);
      std::vector<float> want(n);
      for (std::size_t i = 0; i < n; ++i)
        want[i] = cp::detail::add_rn(acc[i], cp::detail::mul_rn(0.75f, y[i]));
      cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(acc), 0.75f);
      CHECK(std::memcmp(acc.data(), want.data(), 4 * n) == 0);
    });
    // Outputs of at least streaming_store_min_bytes: one on a cache line, and one starting at
    // each other float of a line, under cpu::seq and cpu::par (each range with its own first
    // and last run); nothing written outside them. The one on a line holds the values that
    // decode_accumulate, which never streams, adds to zeros.
    const auto large = [](const char* name, const auto& c) {
      CAPTURE(name);
      const std::size_t n = cp::cpu::detail::streaming_store_min_bytes / 4 + 77;
      const std::vector<float> x = sample(n, 8);
      const auto p = encode_vec(cp::cpu::seq, c, x);
      std::vector<float> buffer(2 * n + 96, 42.0f);
      float* aligned = buffer.data();
      while (reinterpret_cast<std::uintptr_t>(aligned) % 64 != 0)
        ++aligned;
      const std::span<float> on_line(aligned, n);
      cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), on_line);
      std::vector<float> added(n, 0.0f);
      cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(added), 1.0f);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < n; ++i) // 0 + -0 is +0, and x86 gives a NaN's sign: by value
        differ += on_line[i] != added[i] && !(std::isnan(on_line[i]) && std::isnan(added[i]));
      CHECK(differ == 0);
      float* const off = aligned + (n + 31) / 16 * 16; // on a cache line
      for (std::size_t lead = 1; lead < 16; ++lead) {
        CAPTURE(lead);
        const std::span<float> off_line(off + 16 - lead, n);
        std::fill(off, off + n + 32, 42.0f);
        if (lead % 2 == 0)
          cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), off_line);
        else
          cp::decode(cp::cpu::par_t{.threads = 2, .grain = 1000}, c, std::span<const std::byte>(p),
                     off_line);
        CHECK(std::memcmp(on_line.data(), off_line.data(), 4 * n) == 0);
        CHECK(std::all_of(off, off_line.data(), [](float v) { return v == 42.0f; }));
        CHECK(std::all_of(off_line.data() + n, off + n + 32, [](float v) { return v == 42.0f; }));
      }
    };
    large("mxfp4", cp::mxfp4{});
    large("qsgd4", cp::qsgd<4>{});
    large("fp8", cp::fp8{});
    large("natural", cp::natural{}); // byte codes: in runs of 64 only where streamed
    large("qsgd8", cp::qsgd<8>{});
  }

  TEST_CASE_TEMPLATE("streamed_runs: runs at every offset in a cache line, continuing or not, "
                     "write from_float of each value and nothing else",
                     T, float, cp::half, cp::bfloat16) {
    constexpr std::size_t line = 64 / sizeof(T); // elements per cache line
    // Run starts (in elements, from the output's start): contiguous ones, a gap of one line, a
    // single run after a gap, and a last one.
    const std::size_t starts[] = {0, 64, 128, 192 + line, 256 + line, 384 + line, 448 + line};
    const std::size_t n = 512 + line;
    std::vector<float> values(n);
    for (std::size_t i = 0; i < n; ++i)
      values[i] = static_cast<float>(i) * 0.37f - 50.0f;
    values[70] = std::numeric_limits<float>::quiet_NaN();
    values[200 + line] = 1e30f; // infinite as fp16, finite as bf16
    std::vector<T> buffer(n + 3 * line);
    T* aligned = buffer.data();
    while (reinterpret_cast<std::uintptr_t>(aligned) % 64 != 0)
      ++aligned;
    const T guard = cp::from_float<T>(42.0f);
    for (std::size_t lead = 0; lead < line; ++lead) {
      CAPTURE(lead);
      T* const out = aligned + (line - lead) % line; // lead elements before the next line
      std::fill(buffer.begin(), buffer.end(), guard);
      cp::cpu::detail::streamed_runs<T> runs(out, 0);
      CHECK(runs.on_line() == (lead == 0));
      std::vector<bool> written(n, false);
      for (std::size_t s : starts) {
        runs.put_64(s, values.data() + s);
        std::fill(written.begin() + static_cast<std::ptrdiff_t>(s),
                  written.begin() + static_cast<std::ptrdiff_t>(s + 64), true);
      }
      runs.finish();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const T want = written[i] ? cp::from_float<T>(values[i]) : guard;
        wrong += std::memcmp(&out[i], &want, sizeof(T)) != 0;
      }
      CHECK(wrong == 0);
      CHECK(std::all_of(buffer.data(), out,
                        [&](T v) { return std::memcmp(&v, &guard, sizeof(T)) == 0; }));
      CHECK(std::all_of(out + n, buffer.data() + buffer.size(),
                        [&](T v) { return std::memcmp(&v, &guard, sizeof(T)) == 0; }));
    }
  }

  TEST_CASE("scaled: a large fp16 or bf16 output, streamed, holds from_float of the fp32 decode "
            "on a cache line and off one, under seq and par") {
    const std::size_t n = cp::cpu::detail::streaming_store_min_bytes / 2 + 77;
    const auto check = [&](const char* name, const auto& c) {
      CAPTURE(name);
      const auto p = encode_vec(cp::cpu::seq, c, sample(n, 9));
      const auto y = decode_vec(cp::cpu::seq, c, p, n);
      commpress::test::check_streamed_16_bit(y, [&](bool seq, auto out) {
        if (seq)
          cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), out);
        else
          cp::decode(cp::cpu::par_t{.threads = 2, .grain = 1000}, c, std::span<const std::byte>(p),
                     out);
      });
    };
    check("mxfp4", cp::mxfp4{});
    check("qsgd8", cp::qsgd<8>{}); // byte codes: in runs of 64 only where streamed
  }

  TEST_CASE("scaled: roundtrip is decode(encode(x))") {
    for_each_scaled_config([&](const auto& c) {
      std::vector<float> x = sample(300, 11, true);
      x[40] = inf;
      for (const auto on :
           {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
        const auto p = encode_vec(cp::cpu::seq, c, x, on);
        const auto y = decode_vec(cp::cpu::seq, c, p, x.size());
        std::vector<float> r = x;
        std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, r.size()));
        const auto res = cp::roundtrip(cp::cpu::seq, c, {.seed = 1, .step = 2, .on_nonfinite = on},
                                       std::span(r), std::span(ws));
        CHECK(res.nonfinite == 1);
        CHECK(std::memcmp(r.data(), y.data(), 4 * r.size()) == 0);
      }
    });
  }

  TEST_CASE("scaled: NaN/Inf poison their group under propagate and count as 0 under "
            "zero_and_count") {
    for_each_scaled_config([&](const auto& c) {
      const std::size_t n = 96;
      if (!c.can_implement(n))
        return;
      std::vector<float> x = sample(n, 5);
      const std::size_t len = c.block_length() == 0 ? n : c.block_length();
      const bool one_group = len >= n;
      const std::size_t at = one_group ? 1 : len + 1; // in the second group, if there is one
      x[at] = -inf;
      std::size_t bad = 0;
      const auto y =
          decode_vec(cp::cpu::seq, c,
                     encode_vec(cp::cpu::seq, c, x, cp::nonfinite_policy::propagate, &bad), n);
      CHECK(bad == 1);
      const std::size_t first = one_group ? 0 : len, last = std::min(n, first + len);
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        CHECK(std::isnan(y[i]) == (i >= first && i < last));
      }
      std::vector<float> zeroed = x;
      zeroed[at] = 0.0f;
      const auto z = encode_vec(cp::cpu::seq, c, x, cp::nonfinite_policy::zero_and_count, &bad);
      CHECK(bad == 1);
      CHECK(z == encode_vec(cp::cpu::seq, c, zeroed));
      CHECK_THROWS_AS(encode_vec(cp::cpu::seq, c, x, cp::nonfinite_policy::fail), cp::error);
    });
  }

  TEST_CASE("scaled: all-zero groups decode to zeros, constant groups to within rounding (mx: "
            "exactly); tiny groups flush to zero (the deterministic codecs)") {
    for_each_scaled_config([&](const auto& c) {
      if constexpr (std::decay_t<decltype(c)>::stochastic)
        return; // unbiased rather than nearest: stochastic_scaled_test.cpp
      constexpr bool power_of_two_scales =
          std::is_same_v<typename std::decay_t<decltype(c)>::scale, std::uint8_t> &&
          !std::is_same_v<std::decay_t<decltype(c)>, cp::nvfp4>;
      for (const float v : {0.0f, -0.0f, 1.0f, -3.0f, 0.375f}) {
        CAPTURE(v);
        const std::vector<float> x(64, v);
        const auto y = decode_vec(cp::cpu::seq, c, encode_vec(cp::cpu::seq, c, x), 64);
        for (const float e : y) {
          if (power_of_two_scales || v == 0.0f)
            CHECK(bits(e) == bits(v)); // these values are codes times a power of two
          else
            CHECK(std::fabs(e - v) <= 3e-7f * std::fabs(v)); // the roundings of s and 1 / s
        }
      }
      const std::vector<float> tiny(64, 1e-44f);
      for (const float e : decode_vec(cp::cpu::seq, c, encode_vec(cp::cpu::seq, c, tiny), 64))
        CHECK(std::fabs(e) <= 1e-44f);
    });
  }

  TEST_CASE("fp8: s = amax / F, elements within half the format's spacing of x / s") {
    for (const cp::minifloat f : {cp::minifloat::e4m3, cp::minifloat::e5m2}) {
      for (const cp::scale_granularity g :
           {cp::scale_granularity::tensor, cp::scale_granularity::block}) {
        const cp::fp8 c{
            .format = f, .granularity = g, .group = g == cp::scale_granularity::block ? 64u : 0u};
        const std::size_t n = 4096;
        const std::vector<float> x = sample(n, 21, true);
        const auto p = encode_vec(cp::cpu::seq, c, x);
        const auto y = decode_vec(cp::cpu::seq, c, p, n);
        const std::size_t len = c.block_length() == 0 ? n : c.block_length();
        const double top = cp::from_minifloat(f, cp::detail::format_of(f).max_code);
        for (std::size_t g0 = 0; g0 < n; g0 += len) {
          const float amax = stats(x, g0, g0 + len).amax;
          float s;
          std::memcpy(&s, p.data() + 64 + 4 * (g0 / len), 4);
          CHECK(std::isfinite(top * static_cast<double>(s)));
          CHECK(std::fabs(static_cast<double>(s) - amax / top) <= 2.5e-7 * (amax / top) + 1e-45);
          for (std::size_t i = g0; i < g0 + len; ++i) {
            CAPTURE(i);
            const double xs = std::fabs(static_cast<double>(x[i])) / s;
            // The format's rounding, plus the f32 roundings of x * (1/s) and code * s.
            const double bound = (half_spacing(f, std::min(xs, top)) + 3e-7 * xs) * s +
                                 (xs > top ? (xs - top) * s : 0.0) + 1e-45;
            CHECK(std::fabs(static_cast<double>(y[i]) - x[i]) <= bound);
            CHECK(std::isfinite(y[i]));
          }
        }
      }
    }
  }

  TEST_CASE("mx: the scale is the smallest power of two with amax / 2^X <= F; no element "
            "saturates; the only rounding is the element format's") {
    const auto check_mx = [](const auto c, cp::minifloat f) {
      const std::size_t n = 32 * 64;
      std::vector<float> x = sample(n, 23);
      for (std::size_t i = 0; i < n; ++i) // magnitudes over 2^-100 .. 2^100, a block each
        x[i] = std::ldexp(x[i], static_cast<int>(i / 32) * 3 - 96);
      const auto p = encode_vec(cp::cpu::seq, c, x);
      const auto y = decode_vec(cp::cpu::seq, c, p, n);
      const double top = cp::from_minifloat(f, cp::detail::format_of(f).max_code);
      for (std::size_t b = 0; b < n / 32; ++b) {
        const float amax = stats(x, 32 * b, 32 * b + 32).amax;
        const int code = static_cast<int>(static_cast<unsigned char>(p[64 + b]));
        const int X = code - 127;
        CAPTURE(b);
        CHECK(std::ldexp(top, X) >= amax);    // no saturation
        CHECK(std::ldexp(top, X - 1) < amax); // the smallest such power
        for (std::size_t i = 32 * b; i < 32 * b + 32; ++i) {
          const double xs = std::ldexp(std::fabs(static_cast<double>(x[i])), -X);
          CHECK(std::fabs(static_cast<double>(y[i]) - x[i]) <=
                std::ldexp(half_spacing(f, xs), X) + 1e-45);
        }
      }
      // Near the float maximum the exponent is capped so the block still decodes finitely.
      std::vector<float> big(32, 1.0f);
      big[3] = std::numeric_limits<float>::max();
      big[4] = -3.0e38f;
      for (const float v : decode_vec(cp::cpu::seq, c, encode_vec(cp::cpu::seq, c, big), 32))
        CHECK(std::isfinite(v));
    };
    check_mx(cp::mxfp8{}, cp::minifloat::e4m3);
    check_mx(cp::mxfp8_e5m2{}, cp::minifloat::e5m2);
    check_mx(cp::mxfp4{}, cp::minifloat::e2m1);
    // MXFP4 packs two codes to a byte, the first element in the low nibble.
    std::vector<float> two = {0.5f, -6.0f};
    two.resize(32, 0.0f);
    const auto p = encode_vec(cp::cpu::seq, cp::mxfp4{}, two);
    CHECK(static_cast<unsigned>(p[64]) == 127u + 0u);            // amax 6 / F 6 = 1 = 2^0
    CHECK(static_cast<unsigned>(p[65]) == (0x1u | (0xfu << 4))); // 0.5 -> 0x1, -6 -> 0xF
  }

  TEST_CASE("nvfp4: tensor scale amax / 2688, UE4M3 block scales, E2M1 elements") {
    const cp::nvfp4 c{};
    const std::size_t n = 16 * 40;
    std::vector<float> x = sample(n, 29);
    for (std::size_t i = 0; i < n; ++i)
      x[i] = std::ldexp(x[i], static_cast<int>(i / 16) % 9 - 4);
    const auto p = encode_vec(cp::cpu::seq, c, x);
    const auto y = decode_vec(cp::cpu::seq, c, p, n);
    const float amax = stats(x, 0, n).amax;
    float t;
    std::memcpy(&t, p.data() + 64, 4);
    CHECK(t == amax / 2688.0f);
    for (std::size_t b = 0; b < n / 16; ++b) {
      const std::uint32_t s = static_cast<unsigned char>(p[68 + b]);
      CHECK(s < 0x7fu); // finite, sign clear
      const float bmax = stats(x, 16 * b, 16 * b + 16).amax;
      CHECK(s == cp::to_minifloat(cp::minifloat::e4m3, bmax / (6.0f * t)));
      const double f = static_cast<double>(cp::from_minifloat(cp::minifloat::e4m3, s)) * t;
      for (std::size_t i = 16 * b; i < 16 * b + 16; ++i) {
        CAPTURE(i);
        const double xs = std::fabs(static_cast<double>(x[i])) / f;
        // E2M1 rounding (saturation where the rounded block scale fell below amax / 6), plus
        // the f32 roundings of the block factor and of x * (1/f).
        const double bound =
            (half_spacing(cp::minifloat::e2m1, std::min(xs, 6.0)) + 1e-6 * xs) * f +
            (xs > 6.0 ? (xs - 6.0) * f : 0.0) + 1e-40;
        CHECK(std::fabs(static_cast<double>(y[i]) - x[i]) <= bound);
      }
    }
    // The largest finite inputs stay finite.
    std::vector<float> big(48, 2.0f);
    big[0] = std::numeric_limits<float>::max();
    big[20] = -std::numeric_limits<float>::max();
    for (const float v : decode_vec(cp::cpu::seq, c, encode_vec(cp::cpu::seq, c, big), 48))
      CHECK(std::isfinite(v));
  }

  TEST_CASE("scaled: foreign, truncated and corrupted payloads are refused and leave the output") {
    const std::vector<float> x = sample(200, 31);
    const auto p8 = encode_vec(cp::cpu::seq, cp::mxfp8{}, x);
    std::vector<float> out(200, 7.0f);
    const auto untouched = [&] {
      return std::all_of(out.begin(), out.end(), [](float v) { return v == 7.0f; });
    };
    const auto code_of = [&](auto&& call) {
      try {
        call();
      } catch (const cp::error& e) {
        return e.code();
      }
      return cp::errc::ok;
    };
    const std::span<const std::byte> span8(p8);
    CHECK(code_of([&] { cp::decode(cp::cpu::seq, cp::mxfp4{}, span8, std::span(out)); }) ==
          cp::errc::codec_mismatch);
    CHECK(code_of([&] { cp::decode(cp::cpu::seq, cp::fp8{}, span8, std::span(out)); }) ==
          cp::errc::codec_mismatch);
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, cp::mxfp8{}, span8.first(p8.size() - 1), std::span(out));
          }) == cp::errc::truncated);
    std::vector<std::byte> bad = p8;
    bad[80] ^= std::byte{0x10};
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, cp::mxfp8{}, std::span<const std::byte>(bad), std::span(out));
          }) == cp::errc::checksum_mismatch);
    std::vector<float> shorter(199);
    CHECK(code_of([&] { cp::decode(cp::cpu::seq, cp::mxfp8{}, span8, std::span(shorter)); }) ==
          cp::errc::size_mismatch);
    const auto pf = encode_vec(cp::cpu::seq, cp::fp8{.group = 64}, x);
    CHECK(code_of([&] {
            cp::decode(cp::cpu::seq, cp::fp8{.group = 32}, std::span<const std::byte>(pf),
                       std::span(out));
          }) == cp::errc::codec_mismatch);
    CHECK(untouched());
    CHECK(code_of([&] {
            (void)encode_vec(cp::cpu::seq,
                             cp::fp8{.granularity = cp::scale_granularity::column, .group = 4}, x);
          }) == cp::errc::invalid_argument);
    CHECK(code_of([&] {
            (void)encode_vec(cp::cpu::seq, cp::fp8{.format = cp::minifloat::e2m1}, x);
          }) == cp::errc::invalid_argument);
  }
}
