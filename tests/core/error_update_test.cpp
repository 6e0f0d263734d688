// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
//
// error_update: the state rule shared by error feedback, LoCo, the fused CPU kernels and the
// CUDA LoCo update (docs/methods.md 7.1).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "commpress/core/error_update.hpp"

namespace cpd = commpress::detail;

namespace {
std::uint32_t bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
} // namespace

TEST_SUITE("core") {
  TEST_CASE("error_update: keep 0 is error feedback's e = fresh, held where not finite") {
    const cpd::error_update ef{};
    float e = 5.0f;
    CHECK_FALSE(ef(-0.0f, e));
    CHECK(bits(e) == bits(-0.0f));              // the fresh value itself, sign of zero included
    e = std::numeric_limits<float>::infinity(); // even a non-finite old state does not leak in
    CHECK_FALSE(ef(1.5f, e));
    CHECK(e == 1.5f);
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
      e = 2.0f;
      CHECK(ef(bad, e));
      CHECK(e == 2.0f);
    }
  }

  TEST_CASE("error_update: LoCo's moving average, each operation rounded once") {
    const float beta = 0.8f;
    const cpd::error_update loco{beta, cpd::sub_rn(1.0f, beta)};
    float e = 3.0f;
    CHECK_FALSE(loco(-1.25f, e));
    const float expected =
        cpd::add_rn(cpd::mul_rn(0.8f, 3.0f), cpd::mul_rn(cpd::sub_rn(1.0f, 0.8f), -1.25f));
    CHECK(bits(e) == bits(expected));
    // An average that overflows, or a non-finite fresh error, holds the old value.
    const float big = std::numeric_limits<float>::max();
    const cpd::error_update heavy{2.0f, 2.0f};
    e = big;
    CHECK(heavy(big, e));
    CHECK(e == big);
    e = 1.0f;
    CHECK(loco(std::numeric_limits<float>::quiet_NaN(), e));
    CHECK(e == 1.0f);
  }
}
