// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// qsgd's Elias body (QSGD coding, Alistarh et al., NeurIPS 2017, section 3.2; docs/methods.md
// section 15, docs/wire-format.md "qsgd, Elias body"):
// - it sends the fixed coding's levels, signs and random draws: decode, decode_accumulate and
//   roundtrip equal the fixed body's bit for bit, for every size, block, s and code width, and
//   cpu::par writes cpu::seq's bytes;
// - its length is the sum of its Elias codes' bits, and for s = 1 it is far below fixed width;
// - decode is unbiased over many steps;
// - all zero, constant, NaN/Inf (both policies), denormal and near-maximum inputs;
// - hand-written streams: the bytes of a worked example, and every malformed stream (a gap past
//   its group's end, a level above s, a stream that ends early, bytes or bits after its end)
//   refused with commpress::error, the output untouched; bad configurations refused;
// - mutated streams (bits flipped, cut short, random tails) decode as a bit-by-bit reader
//   written from the document does, and the streams it refuses are refused.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/qsgd.hpp"
#include "commpress/backend/cpu/rotated.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/compress/qsgd.hpp"
#include "commpress/compress/rotated.hpp"
#include "commpress/format/bit_packing.hpp"
#include "commpress/format/header.hpp"

namespace cp = commpress;

namespace {

constexpr float float_max = std::numeric_limits<float>::max();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();
constexpr float inf = std::numeric_limits<float>::infinity();

template <unsigned Bits> cp::qsgd<Bits> elias_of(cp::qsgd<Bits> c) {
  c.coding = cp::qsgd_coding::elias;
  return c;
}

/// The payload of x, cut to the bytes encode reports; `full` gets the whole buffer.
template <class Policy, class C, class T = float>
std::vector<std::byte> encode_vec(const Policy& p, const C& c, const cp::context& ctx,
                                  const std::vector<T>& x, std::size_t* nonfinite = nullptr,
                                  std::vector<std::byte>* full = nullptr) {
  std::vector<std::byte> out(cp::max_payload_bytes(c, x.size()), std::byte{0xab});
  std::vector<std::byte> ws(cp::workspace_bytes(p, c, x.size()));
  const cp::encode_result r =
      cp::encode(p, c, ctx, std::span<const T>(x), std::span(out), std::span(ws));
  if (nonfinite)
    *nonfinite = r.nonfinite;
  if (full)
    *full = out;
  out.resize(r.bytes);
  return out;
}

template <class C, class T = float>
std::vector<T> decode_vec(const C& c, const std::vector<std::byte>& p, std::size_t n) {
  std::vector<T> y(n, T{});
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(y));
  return y;
}

template <class T> bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

std::vector<float> gaussian(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x)
    v = nd(g);
  return x;
}

std::uint64_t gamma_bits(std::uint64_t v) {
  return cp::elias_gamma_bits(v);
}

/// The Elias body's bits from a fixed-coding payload's codes: per group, each nonzero level's
/// gamma(gap) + 1 + gamma(level), and the closing gamma(m + 1 - last).
template <unsigned Bits>
std::uint64_t stream_bits_of(const cp::qsgd<Bits>& c, const std::vector<std::byte>& fixed,
                             std::uint64_t n) {
  const auto* body = reinterpret_cast<const unsigned char*>(fixed.data()) + 64;
  const std::uint64_t groups = cp::scaled::n_groups(c, n);
  const std::uint64_t length = cp::scaled::group_length(c, n);
  const unsigned char* codes = body + 4 * groups;
  std::uint64_t bits = 0;
  for (std::uint64_t g = 0; g < groups; ++g) {
    const std::uint64_t first = g * length;
    const std::uint64_t m = std::min(n, first + length) - first;
    std::uint64_t previous = 0;
    for (std::uint64_t j = 1; j <= m; ++j) {
      const std::uint32_t level =
          cp::detail::unpack_one(codes, first + j - 1, Bits) & cp::qsgd<Bits>::max_levels;
      if (level == 0)
        continue;
      bits += gamma_bits(j - previous) + 1 + gamma_bits(level);
      previous = j;
    }
    bits += gamma_bits(m + 1 - previous);
  }
  return bits;
}

/// Checks that the Elias coding of c matches the fixed coding on x: same decode, accumulate,
/// roundtrip, NaN/Inf count, cpu::par bytes, and the length from the bit-count formula.
template <unsigned Bits>
void check_against_fixed(const cp::qsgd<Bits>& fixed, const std::vector<float>& x,
                         const cp::context& ctx) {
  const cp::qsgd<Bits> elias = elias_of(fixed);
  const std::size_t n = x.size();
  std::size_t bad_fixed = 0, bad_elias = 0;
  std::vector<std::byte> whole;
  const auto pf = encode_vec(cp::cpu::seq, fixed, ctx, x, &bad_fixed);
  const auto pe = encode_vec(cp::cpu::seq, elias, ctx, x, &bad_elias, &whole);
  CHECK(bad_fixed == bad_elias);
  CHECK(pe.size() <= cp::max_payload_bytes(elias, n));
  // The room after the body stays as the caller left it.
  CHECK(std::all_of(whole.begin() + static_cast<std::ptrdiff_t>(pe.size()), whole.end(),
                    [](std::byte b) { return b == std::byte{0xab}; }));
  // The same bytes under cpu::par, with ranges much shorter than the tensor.
  const cp::cpu::par_t par{.threads = 3, .grain = 64};
  CHECK(encode_vec(par, elias, ctx, x) == pe);
  // The length: the norms and the stream's bits, rounded up to bytes.
  const std::uint64_t groups = cp::scaled::n_groups(fixed, n);
  const std::uint64_t expected = n == 0 ? 0 : 4 * groups + (stream_bits_of(fixed, pf, n) + 7) / 8;
  CHECK(pe.size() == 64 + expected);
  CHECK(cp::format::read_header(pe.data()).body_bytes == expected);
  // Decodes: of the exact bytes, and of the whole max-size buffer.
  const std::vector<float> yf = decode_vec(fixed, pf, n);
  CHECK(same_bits(decode_vec(elias, pe, n), yf));
  CHECK(same_bits(decode_vec(elias, whole, n), yf));
  CHECK(same_bits(decode_vec<cp::qsgd<Bits>, cp::half>(elias, pe, n),
                  decode_vec<cp::qsgd<Bits>, cp::half>(fixed, pf, n)));
  std::vector<float> y_par(n);
  cp::decode(par, elias, std::span<const std::byte>(pe), std::span(y_par));
  CHECK(same_bits(y_par, yf));
  // Accumulate: the zeros too (acc = -0 plus +0 is +0).
  std::vector<float> af = gaussian(n, 5);
  if (n > 0)
    af[0] = -0.0f;
  std::vector<float> ae = af;
  std::vector<float> ap = af;
  cp::decode_accumulate(cp::cpu::seq, fixed, std::span<const std::byte>(pf), std::span(af), -0.75f);
  cp::decode_accumulate(cp::cpu::seq, elias, std::span<const std::byte>(pe), std::span(ae), -0.75f);
  cp::decode_accumulate(par, elias, std::span<const std::byte>(pe), std::span(ap), -0.75f);
  CHECK(same_bits(ae, af));
  CHECK(same_bits(ap, af));
  // Roundtrip.
  std::vector<float> rf = x, re = x;
  std::vector<std::byte> wf(cp::workspace_bytes(cp::cpu::seq, fixed, n));
  std::vector<std::byte> we(cp::workspace_bytes(cp::cpu::seq, elias, n));
  cp::roundtrip(cp::cpu::seq, fixed, ctx, std::span(rf), std::span(wf));
  cp::roundtrip(cp::cpu::seq, elias, ctx, std::span(re), std::span(we));
  CHECK(same_bits(re, rf));
  CHECK(same_bits(re, yf));
}

/// A bit stream written by hand: LSB first, Elias-gamma most significant bit first.
struct stream {
  std::vector<int> bits;
  stream& bit(int b) {
    bits.push_back(b);
    return *this;
  }
  stream& gamma(std::uint64_t v) {
    int top = 63;
    while (((v >> top) & 1u) == 0)
      --top;
    for (int i = 0; i < top; ++i)
      bit(0);
    for (int i = top; i >= 0; --i)
      bit(static_cast<int>((v >> i) & 1u));
    return *this;
  }
  std::vector<std::byte> bytes() const {
    std::vector<std::byte> out((bits.size() + 7) / 8, std::byte{0});
    for (std::size_t j = 0; j < bits.size(); ++j)
      if (bits[j])
        out[j / 8] |= std::byte{static_cast<unsigned char>(1u << (j % 8))};
    return out;
  }
};

/// A sealed payload of codec c for n elements with this body.
template <class C>
std::vector<std::byte> payload_of(const C& c, std::uint64_t n, const std::vector<std::byte>& body,
                                  const cp::context& ctx = {}) {
  cp::payload_header h = cp::format::header_of(c, ctx, cp::dtype::f32, n);
  h.body_bytes = body.size();
  std::vector<std::byte> p(64 + body.size());
  cp::format::write_header(h, p.data());
  std::copy(body.begin(), body.end(), p.begin() + 64);
  cp::format::seal(p, body.size());
  return p;
}

std::vector<std::byte> norms(std::initializer_list<float> r) {
  std::vector<std::byte> out;
  for (float v : r) {
    std::uint32_t b = 0;
    std::memcpy(&b, &v, 4);
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<std::byte>(b >> (8 * i)));
  }
  return out;
}

std::vector<std::byte> cat(std::vector<std::byte> a, const std::vector<std::byte>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// decode and decode_accumulate refuse p with `code`, leaving their outputs as they were.
template <class C>
void expect_refused(const C& c, const std::vector<std::byte>& p, std::size_t n, cp::errc code) {
  std::vector<float> out(n, 7.0f), acc(n, -3.0f);
  const auto code_of = [](auto&& call) {
    try {
      call();
    } catch (const cp::error& e) {
      return e.code();
    }
    return cp::errc::ok;
  };
  CHECK(code_of([&] {
          cp::decode(cp::cpu::seq, c, std::span<const std::byte>(p), std::span(out));
        }) == code);
  CHECK(code_of([&] {
          cp::decode_accumulate(cp::cpu::par_t{.threads = 2, .grain = 8}, c,
                                std::span<const std::byte>(p), std::span(acc), 0.5f);
        }) == code);
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(out[i] == 7.0f);
    CHECK(acc[i] == -3.0f);
  }
}

/// The values an Elias body decodes to, read one bit at a time by the rules of
/// docs/wire-format.md ("qsgd, Elias body"), independently of the library's reader; nothing
/// where the stream is not one the encoder writes.
template <unsigned Bits>
std::optional<std::vector<float>> reference_decode(const cp::qsgd<Bits>& c, std::uint64_t n,
                                                   const std::vector<std::byte>& body) {
  const std::uint64_t groups = cp::scaled::n_groups(c, n);
  const std::uint64_t length = cp::scaled::group_length(c, n);
  if (body.size() < 4 * groups)
    return std::nullopt;
  std::uint64_t at = 8 * 4 * groups; // bit position in the body
  bool ran_out = false;
  const auto bit = [&]() -> unsigned {
    if (at >= 8 * body.size()) {
      ran_out = true;
      return 1; // ends any run of zeros; the result is discarded
    }
    const unsigned b = (std::to_integer<unsigned>(body[at / 8]) >> (at % 8)) & 1u;
    ++at;
    return b;
  };
  const auto gamma = [&]() -> std::uint64_t {
    unsigned zeros = 0;
    while (bit() == 0)
      if (++zeros > 63)
        return 0;
    std::uint64_t v = 1;
    for (unsigned k = 0; k < zeros; ++k)
      v = v << 1 | bit();
    return v;
  };
  std::vector<float> y(n);
  for (std::uint64_t g = 0; g < groups; ++g) {
    float r = 0;
    std::memcpy(&r, body.data() + 4 * g, 4);
    const auto d = c.make_decoder(r, cp::no_tensor_scale{});
    const std::uint64_t first = g * length;
    const std::uint64_t m = std::min(n, first + length) - first;
    for (std::uint64_t j = 0; j < m; ++j)
      y[first + j] = c.decode_value(0, d);
    std::uint64_t previous = 0;
    for (;;) {
      const std::uint64_t gap = gamma();
      if (ran_out || gap == 0 || gap > m + 1 - previous)
        return std::nullopt;
      const std::uint64_t position = previous + gap;
      if (position == m + 1)
        break;
      const std::uint32_t sign = bit();
      const std::uint64_t level = gamma();
      if (ran_out || level == 0 || level > c.levels)
        return std::nullopt;
      y[first + position - 1] =
          c.decode_value(sign << (Bits - 1) | static_cast<std::uint32_t>(level), d);
      previous = position;
    }
  }
  if ((at + 7) / 8 != body.size())
    return std::nullopt;
  while (at % 8 != 0)
    if (bit() != 0)
      return std::nullopt;
  return y;
}

/// Decodes 3000 mutations of the Elias body of x under cpu::seq and cpu::par: bits flipped
/// anywhere or near the end, cut short, random tails. Each must decode as reference_decode does,
/// or be refused with errc::corrupt where it refuses, the output untouched. Returns the counts
/// accepted and refused.
template <unsigned Bits>
std::pair<int, int> check_mutations(const cp::qsgd<Bits>& c, const std::vector<float>& x,
                                    std::mt19937& gen) {
  const std::size_t n = x.size();
  const auto p = encode_vec(cp::cpu::seq, c, cp::context{.seed = 5}, x);
  const std::vector<std::byte> body(p.begin() + 64, p.end());
  const std::size_t stream_at = 4 * cp::scaled::n_groups(c, n);
  REQUIRE(body.size() > stream_at + 64);
  REQUIRE(reference_decode(c, n, body).has_value());
  CHECK(same_bits(*reference_decode(c, n, body), decode_vec(c, p, n)));
  const cp::cpu::par_t par{.threads = 2, .grain = 64};
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    CAPTURE(trial);
    std::vector<std::byte> b = body;
    const std::size_t stream_bits = 8 * (b.size() - stream_at);
    switch (trial % 4) {
    case 0: // one bit flipped anywhere in the stream
    case 1: // two bits flipped in its last 16 bytes, where reads run up to its end
      for (int k = 0; k <= trial % 4; ++k) {
        const std::size_t span = trial % 4 == 0 ? stream_bits : 128;
        const std::size_t bit = 8 * b.size() - 1 - gen() % span;
        b[bit / 8] ^= std::byte{static_cast<unsigned char>(1u << (bit % 8))};
      }
      break;
    case 2: // cut short
      b.resize(stream_at + gen() % (b.size() - stream_at));
      break;
    default: // random bytes from a random point on
      for (std::size_t i = stream_at + gen() % (b.size() - stream_at); i < b.size(); ++i)
        b[i] = static_cast<std::byte>(gen());
    }
    const auto want = reference_decode(c, n, b);
    const std::vector<std::byte> mutated = payload_of(c, n, b);
    std::vector<float> y(n, 7.0f), y_par(n, 7.0f);
    bool ok = true, ok_par = true;
    try {
      cp::decode(cp::cpu::seq, c, std::span<const std::byte>(mutated), std::span(y));
    } catch (const cp::error& e) {
      CHECK(e.code() == cp::errc::corrupt);
      ok = false;
    }
    try {
      cp::decode(par, c, std::span<const std::byte>(mutated), std::span(y_par));
    } catch (const cp::error& e) {
      CHECK(e.code() == cp::errc::corrupt);
      ok_par = false;
    }
    CHECK(ok == want.has_value());
    CHECK(ok_par == ok);
    CHECK(same_bits(y_par, y));
    if (ok && want) {
      CHECK(same_bits(y, *want));
      ++accepted;
    } else if (!ok) {
      CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 7.0f; }));
      ++refused;
    }
  }
  return {accepted, refused};
}

} // namespace

TEST_SUITE("compress") {
  TEST_CASE("qsgd elias: decode equals the fixed coding's bit for bit, cpu::par writes cpu::seq's "
            "bytes, and the length is the sum of the Elias codes") {
    const cp::context ctx{.seed = 11, .step = 5, .tensor_id = 2};
    const auto each = [&](auto q) {
      using Q = decltype(q);
      for (const std::uint32_t s : {1u, 3u, 7u, 127u}) {
        if (s > Q::max_levels)
          continue;
        for (const std::uint32_t block : {0u, 8u, 5u, 128u}) {
          for (const std::size_t n : {0u, 1u, 7u, 8u, 9u, 1000u}) {
            CAPTURE(Q::code_bits);
            CAPTURE(s);
            CAPTURE(block);
            CAPTURE(n);
            check_against_fixed(Q{.block = block, .levels = s}, gaussian(n, 3 + n + s), ctx);
          }
        }
      }
    };
    each(cp::qsgd8{});
    each(cp::qsgd4{});
    each(cp::qsgd2{});
    // A tensor whose groups are longer than cpu::par's ranges, and a long all-nonzero one.
    check_against_fixed(cp::qsgd8{.block = 0, .levels = 127}, gaussian(70001, 9), ctx);
    check_against_fixed(cp::qsgd4{.block = 3000, .levels = 7}, gaussian(10007, 10), ctx);
    std::vector<float> ones(999, 1.0f);
    check_against_fixed(cp::qsgd8{.block = 1, .levels = 127}, ones, ctx);
    // Gaps of 2^16 and more, whose gamma codes go out apart from their entries.
    std::vector<float> far(150001, 0.0f);
    far[3] = 1.0f;
    far[3 + 65536] = -2.0f;
    far[140000] = 0.5f;
    check_against_fixed(cp::qsgd4{.levels = 7}, far, ctx);
  }

  TEST_CASE("qsgd elias: Elias-gamma codes of every length, written and read back") {
    // Values of 1 to 64 bits, each between two short codes, into a room one byte longer than
    // the stream: the writer must not touch that byte.
    std::mt19937_64 gen(3);
    std::vector<std::uint64_t> values;
    for (unsigned bits = 1; bits <= 64; ++bits) {
      const std::uint64_t top = std::uint64_t{1} << (bits - 1);
      values.push_back(top);
      values.push_back(top | (gen() & (top - 1)));
      values.push_back(1 + bits % 3);
    }
    std::uint64_t stream_bits = 0;
    for (const std::uint64_t v : values)
      stream_bits += gamma_bits(v);
    std::vector<unsigned char> room((stream_bits + 7) / 8 + 1, 0xee);
    namespace elias = cp::cpu::detail::qsgd_elias;
    elias::bit_writer w{room.data()};
    for (const std::uint64_t v : values)
      w.gamma(v);
    w.finish();
    CHECK(w.bits == stream_bits);
    CHECK(room.back() == 0xee); // nothing past the room
    elias::bit_reader r{room.data(), room.data(), room.data() + room.size() - 1};
    for (const std::uint64_t v : values) {
      CAPTURE(v);
      CHECK(r.gamma() == v);
    }
    CHECK(r.bits_read() == stream_bits);
  }

  TEST_CASE("qsgd elias: for s = 1 on Gaussian input the body is far below fixed width, and the "
            "worst case is max_payload_bytes") {
    const std::vector<float> x = gaussian(65536, 21);
    const cp::context ctx{.seed = 1, .step = 0};
    // One norm for the tensor: about sqrt(n) E|x| / sigma nonzero levels.
    const auto f0 = encode_vec(cp::cpu::seq, cp::qsgd2{.levels = 1}, ctx, x);
    const auto e0 = encode_vec(cp::cpu::seq, elias_of(cp::qsgd2{.levels = 1}), ctx, x);
    CHECK(e0.size() * 10 < f0.size());
    // The paper's buckets of 128: still less than half.
    const auto f1 = encode_vec(cp::cpu::seq, cp::qsgd2{.block = 128, .levels = 1}, ctx, x);
    const auto e1 =
        encode_vec(cp::cpu::seq, elias_of(cp::qsgd2{.block = 128, .levels = 1}), ctx, x);
    CHECK(e1.size() * 2 < f1.size());
    // Every level s (one element per group, the group's norm equal to it): the largest body.
    const std::vector<float> alt = {1.0f, -2.0f, 3.0f, -4.0f, 5.0f, -6.0f, 7.0f};
    const auto c = elias_of(cp::qsgd8{.block = 1, .levels = 100});
    CHECK(encode_vec(cp::cpu::seq, c, ctx, alt).size() == cp::max_payload_bytes(c, alt.size()));
    CHECK(cp::max_payload_bytes(c, 7) == 64 + 7 * 4 + (7 * (2 + 13) + 7 + 7) / 8);
  }

  TEST_CASE("qsgd elias: unbiased over many steps") {
    std::vector<float> x(200);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = 2.0f * static_cast<float>((static_cast<int>(i * 37 % 101) - 50)) / 50.0f;
    double sq = 0;
    for (float v : x)
      sq += static_cast<double>(v) * v;
    const double r = std::sqrt(sq);
    for (const std::uint32_t s : {1u, 3u}) {
      CAPTURE(s);
      const auto c = elias_of(cp::qsgd4{.levels = s});
      const double unit = r / s;
      const int steps = 2000;
      std::vector<double> mean(x.size());
      for (int t = 0; t < steps; ++t) {
        const auto p = encode_vec(cp::cpu::seq, c,
                                  cp::context{.seed = 7, .step = static_cast<std::uint64_t>(t)}, x);
        const std::vector<float> y = decode_vec(c, p, x.size());
        for (std::size_t i = 0; i < x.size(); ++i)
          mean[i] += y[i];
      }
      for (std::size_t i = 0; i < x.size(); ++i) {
        CAPTURE(i);
        mean[i] /= steps;
        // Within five standard errors of the variance (r/s)^2 p(1-p); rounding to the nearest
        // level instead would be off by min(p, 1 - p) r/s, far beyond it for most elements.
        const double level = std::fabs(static_cast<double>(x[i])) / unit;
        const double frac = level - std::floor(level);
        const double var = unit * unit * frac * (1 - frac);
        CHECK(std::fabs(mean[i] - x[i]) <= 5.0 * std::sqrt(var / steps) + 1e-5);
      }
    }
  }

  TEST_CASE("qsgd elias: all zero, constant, NaN/Inf, denormals and the float maximum") {
    const cp::context ctx{.seed = 4, .step = 9};
    const cp::context zero_count{
        .seed = 4, .step = 9, .on_nonfinite = cp::nonfinite_policy::zero_and_count};
    // All zero: every group is its norm 0 and its closing gap alone.
    const auto z = encode_vec(cp::cpu::seq, elias_of(cp::qsgd4{.block = 5}), ctx,
                              std::vector<float>(12, 0.0f));
    CHECK(z.size() == 64 + 3 * 4 + (2 * gamma_bits(6) + gamma_bits(3) + 7) / 8);
    for (float v : decode_vec(elias_of(cp::qsgd4{.block = 5}), z, 12))
      CHECK((v == 0.0f && !std::signbit(v)));
    std::vector<std::vector<float>> cases = {std::vector<float>(100, -0.625f),
                                             gaussian(100, 2, 1e-40f), gaussian(100, 3, 1e-20f)};
    std::vector<float> big = gaussian(100, 4, 1e38f);
    for (float& v : big)
      v = std::clamp(v, -float_max, float_max);
    big[0] = float_max;
    big[1] = -float_max;
    cases.push_back(big);
    std::vector<float> special = gaussian(100, 5);
    special[3] = qnan;
    special[40] = inf;
    special[77] = -inf;
    special[90] = 1e-45f;
    cases.push_back(special);
    for (const auto& x : cases)
      for (const std::uint32_t block : {0u, 16u})
        for (const std::uint32_t s : {1u, 7u}) {
          CAPTURE(block);
          CAPTURE(s);
          check_against_fixed(cp::qsgd4{.block = block, .levels = s}, x, ctx);
          check_against_fixed(cp::qsgd4{.block = block, .levels = s}, x, zero_count);
        }
    // propagate: the poisoned groups decode to NaN, the others stay finite.
    const auto c = elias_of(cp::qsgd4{.block = 16});
    std::size_t bad = 0;
    const std::vector<float> y =
        decode_vec(c, encode_vec(cp::cpu::seq, c, ctx, special, &bad), 100);
    CHECK(bad == 3);
    for (std::size_t i = 0; i < 100; ++i) {
      CAPTURE(i);
      const bool poisoned = i / 16 == 0 || i / 16 == 2 || i / 16 == 4;
      CHECK(std::isnan(y[i]) == poisoned);
    }
    for (float v : decode_vec(c, encode_vec(cp::cpu::seq, c, zero_count, special), 100))
      CHECK(std::isfinite(v));
    for (float v : decode_vec(c, encode_vec(cp::cpu::seq, c, ctx, big), 100))
      CHECK(std::isfinite(v));
  }

  TEST_CASE("qsgd elias: the bytes of a hand-written stream, and malformed streams refused with "
            "nothing written") {
    // s = 1, one group of 4: x = (0, 0, -2, 0), r = 2, element 2 is -r: level 1 whatever its
    // draw. Stream: gamma(3) = 011, sign 1, gamma(1) = 1, closing gamma(5 - 3) = 010.
    const auto c = elias_of(cp::qsgd2{.levels = 1});
    const auto p = encode_vec(cp::cpu::seq, c, cp::context{.seed = 3}, {0.0f, 0.0f, -2.0f, 0.0f});
    const auto want_body = cat(norms({2.0f}), stream{}.gamma(3).bit(1).gamma(1).gamma(2).bytes());
    CHECK(want_body == std::vector<std::byte>{std::byte{0x00}, std::byte{0x00}, std::byte{0x00},
                                              std::byte{0x40}, std::byte{0x5e}});
    CHECK(std::vector<std::byte>(p.begin() + 64, p.end()) == want_body);
    CHECK(p == payload_of(c, 4, want_body, cp::context{.seed = 3}));
    const std::vector<float> y = decode_vec(c, p, 4);
    CHECK(same_bits(y, std::vector<float>{0.0f, 0.0f, -2.0f, 0.0f}));

    // Two groups of 3 (block 3, n = 6), s = 3.
    const auto c3 = elias_of(cp::qsgd4{.block = 3, .levels = 3});
    const auto r = norms({3.0f, 1.0f});
    const auto good = stream{}.gamma(2).bit(0).gamma(3).gamma(2).gamma(1).bit(1).gamma(1).gamma(3);
    const std::vector<float> gy = decode_vec(c3, payload_of(c3, 6, cat(r, good.bytes())), 6);
    CHECK(same_bits(gy, std::vector<float>{0.0f, 3.0f, 0.0f, -1.0f / 3.0f, 0.0f, 0.0f}));
    struct bad {
      const char* what;
      std::vector<std::byte> body;
      cp::errc code;
    };
    std::vector<std::byte> trailing = cat(r, good.bytes());
    trailing.push_back(std::byte{0});
    // Both groups all zero: 10 bits, so the last byte has 6 bits of padding.
    const auto empty = stream{}.gamma(4).gamma(4);
    for (float v : decode_vec(c3, payload_of(c3, 6, cat(r, empty.bytes())), 6))
      CHECK(v == 0.0f);
    std::vector<std::byte> high_bit = cat(r, empty.bytes());
    high_bit.back() |= std::byte{0x80};
    std::vector<std::byte> cut = cat(r, good.bytes());
    cut.pop_back();
    const std::vector<bad> table = {
        {"a gap past the group's end", cat(r, stream{}.gamma(5).bytes()), cp::errc::corrupt},
        {"an entry at the closing position's right",
         cat(r, stream{}.gamma(2).bit(0).gamma(3).gamma(3).bytes()), cp::errc::corrupt},
        {"a level above s", cat(r, stream{}.gamma(1).bit(0).gamma(4).gamma(3).gamma(4).bytes()),
         cp::errc::corrupt},
        {"the stream ends inside a group", cat(r, stream{}.gamma(2).bit(0).gamma(3).bytes()),
         cp::errc::corrupt},
        {"the stream ends before the last group", cat(r, stream{}.gamma(4).bytes()),
         cp::errc::corrupt},
        {"the body ends early", cut, cp::errc::corrupt},
        {"the body ends inside the norms", norms({3.0f}), cp::errc::corrupt},
        {"an empty body", {}, cp::errc::corrupt},
        {"a byte after the stream", trailing, cp::errc::corrupt},
        {"a bit after the stream", high_bit, cp::errc::corrupt},
        {"a gamma code of 65 bits", cat(r, std::vector<std::byte>(9, std::byte{0})),
         cp::errc::corrupt},
        {"a gap of 2^60, its zeros longer than one refill",
         cat(r, stream{}.gamma(std::uint64_t{1} << 60).gamma(4).bytes()), cp::errc::corrupt},
    };
    for (const auto& b : table) {
      CAPTURE(std::string(b.what));
      expect_refused(c3, payload_of(c3, 6, b.body), 6, b.code);
    }
    // Levels the codes cannot hold (above 2^(Bits-1) - 1): no table slot takes them, so the
    // entry's long path refuses them. s = 1 with 2-bit codes (level 2); s = 3 with 4-bit codes
    // (level 8, an entry of 9 bits, short enough for a slot).
    expect_refused(
        c, payload_of(c, 4, cat(norms({2.0f}), stream{}.gamma(1).bit(0).gamma(2).gamma(4).bytes())),
        4, cp::errc::corrupt);
    expect_refused(
        c3, payload_of(c3, 6, cat(r, stream{}.gamma(1).bit(0).gamma(8).gamma(3).gamma(4).bytes())),
        6, cp::errc::corrupt);
    // A body longer than the largest this configuration writes.
    expect_refused(c3, payload_of(c3, 6, std::vector<std::byte>(100)), 6, cp::errc::corrupt);
    // Truncated and corrupted payloads of the encoder.
    const auto x = gaussian(300, 8);
    const auto e = elias_of(cp::qsgd8{.block = 64, .levels = 7});
    const auto pe = encode_vec(cp::cpu::seq, e, cp::context{}, x);
    auto short_p = pe;
    short_p.pop_back();
    expect_refused(e, short_p, 300, cp::errc::truncated);
    auto flipped = pe;
    flipped[64 + 30] ^= std::byte{0x04};
    expect_refused(e, flipped, 300, cp::errc::checksum_mismatch);
    // The fixed coding's payload is another configuration's (params byte 8), and vice versa.
    const auto pf = encode_vec(cp::cpu::seq, cp::qsgd8{.block = 64, .levels = 7}, cp::context{}, x);
    expect_refused(e, pf, 300, cp::errc::codec_mismatch);
    expect_refused(cp::qsgd8{.block = 64, .levels = 7}, pe, 300, cp::errc::codec_mismatch);
    CHECK(cp::format::read_header(pe.data()).params[8] == 1);
    CHECK(cp::format::read_header(pf.data()).params[8] == 0);
  }

  TEST_CASE("qsgd elias: decode agrees with a bit-by-bit reader on mutated streams, refusing "
            "the same ones") {
    // Levels and gaps on both sides of the decoder's whole-entry lookup (both below 32): groups
    // of sparse Gaussian noise with large outliers, and long zero runs.
    std::mt19937 gen(17);
    std::normal_distribution<float> nd;
    const std::size_t n = 3001;
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i)
      x[i] = (i / 500) % 2 == 1 && i % 97 != 0 ? 0.0f : nd(gen) * (i % 13 == 0 ? 40.0f : 1.0f);
    // A dense stream (s = 127 in blocks of 256: most elements are entries) and a sparse one
    // (one norm for 20000 Gaussian elements and s = 1: some 110 levels of 1, long gaps).
    SUBCASE("dense") {
      const auto c = elias_of(cp::qsgd8{.block = 256, .levels = 127});
      const auto [accepted, refused] = check_mutations(c, x, gen);
      // Both outcomes are reached often (a flipped sign bit is still a valid stream).
      CHECK(accepted > 100);
      CHECK(refused > 1000);
    }
    SUBCASE("sparse") {
      const auto c = elias_of(cp::qsgd2{.levels = 1});
      const auto [accepted, refused] = check_mutations(c, gaussian(20000, 23), gen);
      // Fewer are accepted: a sign is one bit in some 16 of this stream's.
      CHECK(accepted > 30);
      CHECK(refused > 1000);
    }
  }

  TEST_CASE("qsgd elias: bad configurations are refused") {
    cp::qsgd4 c{.levels = 3};
    c.coding = static_cast<cp::qsgd_coding>(2);
    CHECK_FALSE(c.can_implement(10));
    const std::vector<float> x(10, 1.0f);
    std::vector<std::byte> out(cp::max_payload_bytes(c, 10));
    CHECK_THROWS_AS(
        cp::encode(cp::cpu::seq, c, cp::context{}, std::span<const float>(x), std::span(out)),
        cp::error);
    CHECK_FALSE(elias_of(cp::qsgd4{.levels = 8}).can_implement(10));
    CHECK_FALSE(elias_of(cp::qsgd2{.levels = 0}).can_implement(10));
    // The rotation reads its inner body window by window, which the Elias stream does not allow.
    const cp::rotated<cp::qsgd4> rot{elias_of(cp::qsgd4{}), 8};
    CHECK_FALSE(rot.can_implement(100));
    CHECK(cp::rotated<cp::qsgd4>{cp::qsgd4{}, 8}.can_implement(100));
    // A buffer smaller than the worst case is refused before anything is written.
    const auto e = elias_of(cp::qsgd4{});
    std::vector<std::byte> small(cp::max_payload_bytes(e, 10) - 1, std::byte{0x5a});
    CHECK_THROWS_AS(
        cp::encode(cp::cpu::seq, e, cp::context{}, std::span<const float>(x), std::span(small)),
        cp::error);
    for (std::byte b : small)
      CHECK(b == std::byte{0x5a});
  }
}
