// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Runs every COMMPRESS_HOST_DEVICE function of the shared headers on the device and on the
// host and compares the bits. Compiling this file under nvcc is itself the check that no
// host-only construct (std:: calls, exceptions, allocation) crept into shared per-element
// code; running it on a GPU checks that both compilations compute the same bits
// (docs/methods.md 11.1, C0.1; docs/cuda.md, "Parity guarantees and how they are kept").

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "commpress/backend/cuda/detail/checksum.cuh"
#include "commpress/compress/cast.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/compress/random_k.hpp"
#include "commpress/compress/sign.hpp"
#include "commpress/compress/top_k.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/format/bit_packing.hpp"
#include "commpress/format/crc32c.hpp"
#include "commpress/format/header.hpp"

#include "cuda_test_support.cuh"

namespace {

using namespace commpress;

/// Words each element's evaluation writes (unused ones stay zero).
constexpr unsigned words_per_element = 320;

struct word_sink {
  std::uint32_t* w;
  unsigned used = 0;
  COMMPRESS_HOST_DEVICE void put(std::uint32_t v) {
    if (used < words_per_element)
      w[used] = v;
    ++used;
  }
  COMMPRESS_HOST_DEVICE void put(float v) { put(detail::float_to_bits(v)); }
  COMMPRESS_HOST_DEVICE void put(double v) {
    std::uint64_t u;
    std::memcpy(&u, &v, sizeof u);
    put(static_cast<std::uint32_t>(u));
    put(static_cast<std::uint32_t>(u >> 32));
  }
  /// A canonical sum: a NaN one as one pattern, since which NaN payload a sum of NaN terms
  /// carries differs between host and device (canonical_sum.hpp); its consumers only test NaN.
  COMMPRESS_HOST_DEVICE void put_sum(double v) {
    if (v != v)
      put64(0x7ff8000000000000ull);
    else
      put(v);
  }
  COMMPRESS_HOST_DEVICE void put64(std::uint64_t v) {
    put(static_cast<std::uint32_t>(v));
    put(static_cast<std::uint32_t>(v >> 32));
  }
};

/// Every shared per-element function applied to element i of `in`; identical on both sides.
COMMPRESS_HOST_DEVICE unsigned evaluate(const float* in, std::uint64_t n, std::uint64_t i,
                                        std::uint32_t* out) {
  word_sink s{out};
  const float x = in[i];
  const float y = in[(i * 7 + 3) % n];
  const std::uint32_t xb = detail::float_to_bits(x);

  // core/math.hpp
  s.put(detail::mul_rn(x, y));
  s.put(detail::add_rn(x, y));
  s.put(detail::sub_rn(x, y));
  s.put(detail::div_rn(x, y));
  s.put(detail::abs(x));
  s.put(detail::max(x, y));
  s.put(detail::min(x, y));
  s.put(detail::is_finite(x) ? 1u : 0u);
  s.put(detail::round_half_even(x));
  s.put(detail::floor_small(x));
  s.put(detail::bits_to_float(xb ^ 0x80000000u));
  s.put64(detail::ceil_div(i + xb, 1 + (i % 13)));

  // core/dtype.hpp
  s.put(std::uint32_t{detail::float_bits_to_bf16_bits(xb)});
  s.put(std::uint32_t{detail::float_bits_to_half_bits(xb)});
  s.put(detail::half_bits_to_float_bits(static_cast<std::uint16_t>(xb)));
  s.put(std::uint32_t{to_half(x).bits});
  s.put(std::uint32_t{to_bfloat16(x).bits});
  s.put(to_float(x));
  s.put(to_float(half{static_cast<std::uint16_t>(xb >> 7)}));
  s.put(to_float(bfloat16{static_cast<std::uint16_t>(xb >> 3)}));
  s.put(from_float<float>(x));
  s.put(std::uint32_t{from_float<half>(x).bits});
  s.put(std::uint32_t{from_float<bfloat16>(x).bits});

  // core/rng.hpp
  const rng_key key = make_rng_key(0x0123456789abcdefull + i, static_cast<std::uint32_t>(i));
  s.put(key.k0);
  s.put(key.k1);
  const rng_block b = philox4x32_10(xb, static_cast<std::uint32_t>(i), 7u, 9u, key);
  for (std::uint32_t v : b.v)
    s.put(v);
  const rng_block rb = random_block(key, 1000 + i, i / 3);
  for (std::uint32_t v : rb.v)
    s.put(v);
  const std::uint32_t r = random_u32(key, 5, i);
  s.put(r);
  s.put(uniform_from_bits(r));
  s.put(uniform_from_bits(xb));

  // core/context.hpp
  for (auto p :
       {nonfinite_policy::propagate, nonfinite_policy::zero_and_count, nonfinite_policy::fail}) {
    std::size_t bad = 0;
    s.put(detail::screen(x, p, bad));
    s.put64(bad);
  }

  // format/bit_packing.hpp: every width 1..8 and group length 1..8
  for (unsigned bits = 1; bits <= 8; ++bits) {
    const unsigned count = 1 + static_cast<unsigned>((i + bits) % 8);
    std::uint32_t codes[8];
    for (unsigned j = 0; j < 8; ++j)
      codes[j] = random_u32(key, bits, j) & ((1u << bits) - 1u);
    unsigned char packed[8] = {};
    detail::pack_group(codes, count, bits, packed);
    std::uint32_t back[8] = {};
    detail::unpack_group(packed, count, bits, back);
    std::uint32_t word0 = 0, word1 = 0;
    for (unsigned j = 0; j < 4; ++j)
      word0 |= std::uint32_t{packed[j]} << (8 * j);
    for (unsigned j = 0; j < 4; ++j)
      word1 |= std::uint32_t{packed[4 + j]} << (8 * j);
    s.put(word0);
    s.put(word1);
    std::uint32_t folded = 0;
    for (unsigned j = 0; j < count; ++j)
      folded = folded * 257u + back[j];
    s.put(folded);
    s.put(detail::unpack_one(packed, i % count, bits));
    s.put64(detail::packed_bytes(i, bits));
  }

  // compress/cast.hpp
  for (dtype d : {dtype::f16, dtype::bf16}) {
    const cast c{d};
    const std::uint16_t code = c.encode_value(x);
    s.put(std::uint32_t{code});
    s.put(c.decode_value(code));
    s.put(c.decode_value(static_cast<std::uint16_t>(xb)));
  }

  s.put(detail::canonical_nan(x));
  s.put64(detail::keep_count(uniform_from_bits(r), i % 3, i));

  // compress/quantize.hpp: every range, a few widths, both roundings
  for (quant_range range : {quant_range::symmetric, quant_range::asymmetric})
    for (unsigned bits : {2u, 4u, 8u}) {
      s.put(quantize::levels(range, bits));
      const float lo = detail::min(x, y);
      const float hi = detail::max(x, y);
      const float s0 = range == quant_range::symmetric ? detail::abs(x) : lo;
      const quantize::coder k = quantize::make_coder(range, bits, s0, hi);
      const quantize::record rec = quantize::make_record(range, bits, s0, hi);
      s.put(k.inv);
      s.put(k.lo);
      s.put(rec.a);
      s.put(rec.b);
      const std::uint32_t qn = quantize::encode_nearest(range, bits, y, k);
      const std::uint32_t qs = quantize::encode_stochastic(range, bits, y, k, uniform_from_bits(r));
      s.put(qn);
      s.put(qs);
      s.put(quantize::decode_value(range, bits, qn, rec));
      s.put(quantize::decode_value(range, bits, qs, rec));
    }

  // compress/random_k.hpp
  for (dtype d : {dtype::f32, dtype::f16, dtype::bf16}) {
    random_k rk;
    rk.values = d;
    rk.unbiased = (i % 2) != 0;
    rk.fraction = uniform_from_bits(r);
    const std::uint64_t big = (std::uint64_t{1} << 40) + i * 977; // j * n needs 128 bits
    s.put64(rk.kept(i));
    s.put64(rk.value_bytes());
    s.put64(random_k::stratum_start(i % 1000, big, 1000));
    s.put64(random_k::pick(i * 3, big >> 12, r));
    const std::uint32_t code = rk.encode_value(x);
    s.put(code);
    s.put(rk.decode_value(code));
    s.put(rk.decode_kept(code, 1 + i % 4096));
  }

  // compress/top_k.hpp
  s.put(top_k::magnitude_key(x));
  for (dtype d : {dtype::f32, dtype::f16, dtype::bf16}) {
    top_k t;
    t.values = d;
    t.fraction = uniform_from_bits(r);
    t.row_length = static_cast<std::uint32_t>(i % 5);
    const std::uint32_t code = t.encode_value(x);
    s.put(code);
    s.put(t.decode_value(code));
    s.put64(t.value_bytes());
    s.put64(t.row_elements(i * 5));
    s.put64(t.rows(i * 5));
    s.put64(t.kept(i));
    t.count = i % 7;
    s.put64(t.kept(i));
  }
  s.put(top_k::index_width(i * 977));
  s.put(top_k::uses_bitmap(i * 31, i % 41) ? 1u : 0u);
  s.put64(top_k::index_bytes(i * 31, i % 41));

  // compress/sign.hpp
  for (sign_scale sc : {sign_scale::mean_abs, sign_scale::rms}) {
    sign g;
    g.scale = sc;
    g.granularity = i % 2 ? sign_granularity::block : sign_granularity::tensor;
    g.block = i % 2 ? static_cast<std::uint32_t>(1 + i % 100) : 0u;
    s.put64(g.group_length(i));
    s.put64(g.groups(i));
    s.put(g.scale_term(x));
    s.put(g.scale_from_sum(g.scale_term(x) * 3.0, 1 + i % 17));
    s.put(sign::encode_bit(x));
    s.put(sign::decode_value(xb & 1u, y));
  }

  // core/canonical_sum.hpp: a short sum for every element, a multi-chunk one for a few
  const std::uint64_t m = i % 100;
  s.put_sum(canonical_sum(
      m, [&](std::uint64_t j) { return static_cast<double>(detail::abs(in[(i + j) % n])); }));
  if (i < 3) {
    const std::uint64_t big = canonical_chunk + 1000 * i + 1;
    s.put_sum(canonical_chunked_sum(big, [&](std::uint64_t j) {
      const double v = in[(i + j) % n];
      return v * v;
    }));
  }
  return s.used;
}

__global__ void evaluate_kernel(const float* in, std::uint64_t n, std::uint32_t* out,
                                unsigned* used) {
  const std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  if (i < n)
    used[i] = evaluate(in, n, i, out + i * words_per_element);
}

/// Inputs that exercise every conversion path: signed zeros, subnormals, fp16 and bf16
/// rounding boundaries, overflow, Inf, NaN, and random bit patterns.
std::vector<float> probe_inputs() {
  const std::uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x3f800000u,
      0xbf800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u,
      0xffc00001u, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u,
      0x38800000u, 0x387fffffu, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x4b400000u,
      0x3f000000u, 0x3fc00000u, 0x40200000u, 0xc0200000u, 0x4a800001u, 0x3eaaaaabu};
  std::vector<float> v;
  for (std::uint32_t b : specials)
    v.push_back(detail::bits_to_float(b));
  const rng_key key = make_rng_key(2026, 1);
  for (std::uint64_t i = 0; v.size() < 1000; ++i) {
    const std::uint32_t bits = random_u32(key, 0, i);
    // Half the randoms are small normal values (|x| < 2^22) where rounding helpers are exact.
    v.push_back(i % 2 ? detail::bits_to_float(bits)
                      : (uniform_from_bits(bits) - 0.5f) * static_cast<float>(1 + i % 4096));
  }
  return v;
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("shared code: every host-device function gives the same bits on host and device") {
    const std::vector<float> in = probe_inputs();
    const std::uint64_t n = in.size();
    std::vector<std::uint32_t> host(n * words_per_element, 0u);
    std::vector<unsigned> host_used(n);
    for (std::uint64_t i = 0; i < n; ++i)
      host_used[i] = evaluate(in.data(), n, i, host.data() + i * words_per_element);
    // The sink must be large enough for everything evaluate() writes.
    for (unsigned u : host_used)
      REQUIRE(u <= words_per_element);

    COMMPRESS_REQUIRE_GPU();
    test::device_buffer<float> d_in(in);
    test::device_buffer<std::uint32_t> d_out(n * words_per_element);
    test::device_buffer<unsigned> d_used(n);
    COMMPRESS_CUDA_TRY(cudaMemset(d_out.data(), 0, n * words_per_element * 4));
    evaluate_kernel<<<static_cast<unsigned>((n + 127) / 128), 128>>>(d_in.data(), n, d_out.data(),
                                                                     d_used.data());
    COMMPRESS_CUDA_TRY(cudaGetLastError());
    COMMPRESS_CUDA_TRY(cudaDeviceSynchronize());
    const std::vector<std::uint32_t> dev = d_out.to_host();
    const std::vector<unsigned> dev_used = d_used.to_host();
    std::size_t mismatches = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      CHECK(dev_used[i] == host_used[i]);
      for (unsigned w = 0; w < host_used[i]; ++w) {
        const std::uint64_t at = i * words_per_element + w;
        if (dev[at] != host[at] && ++mismatches <= 20)
          MESSAGE("element " << i << " (bits " << detail::float_to_bits(in[i]) << ") word " << w
                             << ": host " << host[at] << " device " << dev[at]);
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_SUITE("cuda") {
  // The device checksum hashes 256-byte pieces and chunks independently and combines them with
  // CRC shifts; these are the same host-device functions the kernels call, so this host run
  // checks the decomposition itself against format::payload_checksum (no GPU needed).
  TEST_CASE("cuda checksum: piece and chunk decomposition equals format::payload_checksum") {
    namespace cd = commpress::cuda::detail;
    const rng_key key = make_rng_key(9, 9);
    const std::uint32_t* tables = &commpress::detail::crc32c_tables[0][0];
    for (std::uint64_t len :
         {0ull, 1ull, 255ull, 256ull, 257ull, 65535ull, 65536ull, 65537ull, 3ull * 65536 + 17}) {
      CAPTURE(len);
      std::vector<unsigned char> buf(64 + len + 1);
      for (std::size_t i = 0; i < buf.size(); ++i)
        buf[i] = static_cast<unsigned char>(random_u32(key, len, i));
      // Hash from an odd address too: the sliced loop must handle any alignment.
      const unsigned char* header = buf.data();
      const unsigned char* body = buf.data() + 64 + (len % 2);
      const std::uint64_t m = cd::crc_chunks(len);
      std::uint32_t acc = 0;
      for (std::uint64_t c = 0; c < m; ++c) {
        const std::uint64_t first = c * format::checksum_chunk_bytes;
        const std::uint64_t clen =
            len - first < format::checksum_chunk_bytes ? len - first : format::checksum_chunk_bytes;
        std::uint32_t chunk = 0;
        for (unsigned t = 0; t < cd::block_threads; ++t) {
          const std::uint64_t lo = t * cd::crc_piece_bytes;
          if (lo >= clen)
            continue;
          const std::uint64_t hi =
              lo + cd::crc_piece_bytes < clen ? lo + cd::crc_piece_bytes : clen;
          chunk ^= cd::piece_term(cd::crc_sliced(body + first + lo, hi - lo, tables), t, clen,
                                  cd::crc_powers_table);
        }
        REQUIRE(chunk == commpress::detail::crc32c(body + first, clen));
        acc ^= cd::chunk_term(chunk, c, m, cd::crc_powers_table);
      }
      const std::uint32_t expected =
          format::payload_checksum(reinterpret_cast<const std::byte*>(header),
                                   reinterpret_cast<const std::byte*>(body), len);
      CHECK(cd::payload_crc(header, m, acc, cd::crc_powers_table) == expected);
      CHECK(cd::crc_bitwise(0, body, len) == commpress::detail::crc32c(body, len));
    }
  }
}
