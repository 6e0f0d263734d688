// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "commpress/format/crc32c.hpp"

namespace cpd = commpress::detail;

TEST_SUITE("format") {
  TEST_CASE("crc32c: matches the RFC 3720 test vectors") {
    std::array<unsigned char, 32> b{};
    CHECK(cpd::crc32c(b.data(), b.size()) == 0x8A9136AAu);
    b.fill(0xff);
    CHECK(cpd::crc32c(b.data(), b.size()) == 0x62A8AB43u);
    for (unsigned i = 0; i < 32; ++i)
      b[i] = static_cast<unsigned char>(i);
    CHECK(cpd::crc32c(b.data(), b.size()) == 0x46DD794Eu);
    for (unsigned i = 0; i < 32; ++i)
      b[i] = static_cast<unsigned char>(31 - i);
    CHECK(cpd::crc32c(b.data(), b.size()) == 0x113FDB5Cu);
    constexpr std::string_view s = "123456789";
    CHECK(cpd::crc32c(s.data(), s.size()) == 0xE3069283u);
  }

  TEST_CASE("crc32c: chained updates equal one pass, for every split point") {
    std::array<unsigned char, 67> b{};
    for (unsigned i = 0; i < b.size(); ++i)
      b[i] = static_cast<unsigned char>(i * 37 + 11);
    const std::uint32_t whole = cpd::crc32c(b.data(), b.size());
    for (std::size_t cut = 0; cut <= b.size(); ++cut)
      CHECK(cpd::crc32c_update(cpd::crc32c(b.data(), cut), b.data() + cut, b.size() - cut) ==
            whole);
  }

  TEST_CASE("crc32c: combine joins the CRCs of two pieces hashed separately") {
    std::vector<unsigned char> b(200000);
    for (std::size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
    for (std::size_t total : {0u, 1u, 9u, 67u, 4096u, 65537u, 200000u}) {
      const std::uint32_t whole = cpd::crc32c(b.data(), total);
      for (std::size_t cut : {std::size_t{0}, total / 3, total / 2, total - (total > 0)}) {
        const std::uint32_t a = cpd::crc32c(b.data(), cut);
        const std::uint32_t c = cpd::crc32c(b.data() + cut, total - cut);
        CHECK(cpd::crc32c_combine(a, c, total - cut) == whole);
      }
    }
    // A length with high bits set uses the whole table of powers: combining with a run of zero
    // bytes hashed the long way must agree with the O(log n) shift.
    std::vector<unsigned char> zeros(1u << 20);
    const std::uint32_t a = cpd::crc32c(b.data(), 100);
    const std::uint32_t z = cpd::crc32c(zeros.data(), zeros.size());
    CHECK(cpd::crc32c_combine(a, z, zeros.size()) ==
          cpd::crc32c_update(a, zeros.data(), zeros.size()));
    static_assert(cpd::crc32c_combine(0x12345678u, 0u, 0) == 0x12345678u);
  }
}

TEST_CASE("crc32c: the portable tables agree with the dispatched implementation") {
  std::vector<unsigned char> b(100003);
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  for (std::size_t len : {0u, 1u, 7u, 8u, 9u, 4096u, 100003u})
    CHECK(~cpd::crc32c_portable(~0u, b.data(), len) == cpd::crc32c(b.data(), len));
}

#if defined(COMMPRESS_CRC32C_X86)
TEST_CASE("crc32c: the folding and crc32-instruction paths agree with the tables") {
  // Every length up to 1 KiB covers each exit of the folding loops (256-, 64- and 16-byte steps
  // and a tail of 0-15 bytes), from unaligned starts and several incoming registers.
  std::vector<unsigned char> b(70000 + 16); // room for the longest length at the largest offset
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<unsigned char>(i * 2654435761u >> 11);
  std::vector<std::size_t> lengths;
  for (std::size_t len = 0; len <= 1024; ++len)
    lengths.push_back(len);
  lengths.insert(lengths.end(), {4095u, 4096u, 65536u, 65536u + 255u, 69990u});
  const bool fold = cpd::cpu_has_vpclmul();
  const bool sse42 = cpd::cpu_has_sse42();
  if (!fold)
    MESSAGE("no VPCLMULQDQ with AVX-512 on this CPU: the folding path is not run");
  std::size_t fold_differs = 0, sse42_differs = 0;
  for (std::uint32_t reg : {0u, 0xffffffffu, 0x9e3779b9u})
    for (std::size_t offset : {0u, 1u, 13u})
      for (std::size_t len : lengths) {
        const unsigned char* p = b.data() + offset;
        const std::uint32_t want = cpd::crc32c_portable(reg, p, len);
        if (fold && cpd::crc32c_vpclmul(reg, p, len) != want && fold_differs++ == 0)
          MESSAGE("folding differs first at length " << len << ", offset " << offset);
        if (sse42 && cpd::crc32c_sse42(reg, p, len) != want && sse42_differs++ == 0)
          MESSAGE("crc32 instruction differs first at length " << len << ", offset " << offset);
      }
  CHECK(fold_differs == 0);
  CHECK(sse42_differs == 0);
  // crc32c_x3 takes the folding path one buffer at a time where it exists.
  std::uint32_t three[3];
  cpd::crc32c_x3(b.data(), b.data() + 20000, b.data() + 40000, 20000, three);
  CHECK(three[0] == cpd::crc32c(b.data(), 20000));
  CHECK(three[1] == cpd::crc32c(b.data() + 20000, 20000));
  CHECK(three[2] == cpd::crc32c(b.data() + 40000, 20000));
}
#endif

#if defined(COMMPRESS_CRC32C_STREAMING)
TEST_CASE("crc32c: the streaming fold of 256-byte blocks equals crc32c of the buffer") {
  std::vector<unsigned char> b(256 * 300);
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<unsigned char>(i * 2654435761u >> 9);
  for (std::size_t blocks : {0u, 1u, 2u, 255u, 256u, 300u}) {
    cpd::crc32c_streaming crc;
    for (std::size_t k = 0; k < blocks; ++k) {
      const unsigned char* p = b.data() + 256 * k;
      crc.append(_mm512_loadu_si512(p), _mm512_loadu_si512(p + 64), _mm512_loadu_si512(p + 128),
                 _mm512_loadu_si512(p + 192));
    }
    CHECK(crc.value() == cpd::crc32c(b.data(), 256 * blocks));
  }
}
#endif
