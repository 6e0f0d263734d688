// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include <commpress/commpress.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

namespace cp = commpress;

int main() {
  constexpr std::size_t n = 1000, world = 4;
  const cp::quantize codec{.bits = 4, .granularity = cp::scale_granularity::block, .group = 128};
  const std::size_t stride = cp::max_payload_bytes(codec, n); // fixed: no size round trip
  std::vector<std::byte> gathered(world * stride);            // what an all-gather fills
  std::vector<float> exact(n, 0.0f);
  for (std::size_t r = 0; r < world; ++r) { // each rank encodes its own gradient
    std::vector<float> grad(n);
    for (std::size_t i = 0; i < n; ++i)
      grad[i] = std::sin(0.01f * i * (r + 1));
    for (std::size_t i = 0; i < n; ++i)
      exact[i] += grad[i] / world;
    cp::encode(cp::cpu::seq, codec, {.seed = 42, .step = 0, .tensor_id = 7},
               std::span<const float>(grad), std::span(gathered).subspan(r * stride, stride));
  }
  std::vector<float> mean(n, 0.0f); // every rank decodes every payload into the mean
  for (std::size_t r = 0; r < world; ++r)
    cp::decode_accumulate(cp::cpu::seq, codec, std::span(gathered).subspan(r * stride, stride),
                          std::span(mean), 1.0f / world);
  float worst = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    worst = std::fmax(worst, std::fabs(mean[i] - exact[i]));
  std::printf("%zu bytes per rank instead of %zu; max error of the mean %.4f\n", stride, 4 * n,
              worst);
  return worst < 0.1f ? 0 : 1;
}
