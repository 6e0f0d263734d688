// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// layer_policy: each rule in its order (too small, 1-D, excluded by name, low compression
// rate), the glob patterns, and the compression rate from the pipeline's payload size.

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/pipeline/layer_policy.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

const cp::pipeline<cp::ef, cp::quantize> q4{{}, {.bits = 4, .group = 128}};

cp::tensor_info info(const char* name, const std::vector<std::uint64_t>& shape,
                     cp::dtype element = cp::dtype::f32) {
  return {name, shape, element};
}

} // namespace

TEST_CASE("layer_policy: the defaults skip small and 1-D tensors") {
  const cp::layer_policy p;
  const std::vector<std::uint64_t> conv{64, 64, 3, 3}, bias{64}, big_bias{4096}, small{16, 16};
  CHECK(p.decide(q4, info("layer1.conv.weight", conv)) == cp::layer_verdict::compress);
  CHECK(p.decide(q4, info("layer1.conv.bias", bias)) == cp::layer_verdict::too_small);
  CHECK(p.decide(q4, info("fc.bias", big_bias)) == cp::layer_verdict::one_dimensional);
  CHECK(p.decide(q4, info("tiny.weight", small)) == cp::layer_verdict::too_small);
  CHECK(info("scalar", {}).count() == 1);
  CHECK(p.decide(q4, info("scalar", {})) == cp::layer_verdict::too_small);
}

TEST_CASE(
    "layer_policy: every rule can be switched, and the first that applies names the verdict") {
  cp::layer_policy p{.min_elements = 0, .compress_1d = true};
  const std::vector<std::uint64_t> bias{64}, emb{50000, 512};
  CHECK(p.compressed(q4, info("fc.bias", bias)));
  p.exclude = {"embed*", "*.norm?.weight"};
  CHECK(p.decide(q4, info("embed.weight", emb)) == cp::layer_verdict::excluded);
  CHECK(p.decide(q4, info("blocks.3.norm1.weight", bias)) == cp::layer_verdict::excluded);
  CHECK(p.decide(q4, info("blocks.3.norm12.weight", bias)) == cp::layer_verdict::compress);
  p.min_elements = 100;
  CHECK(p.decide(q4, info("embed.weight", bias)) == cp::layer_verdict::too_small); // first rule
}

TEST_CASE("layer_policy: the compression rate is uncompressed bytes over the payload's") {
  const std::vector<std::uint64_t> shape{256, 256};
  const std::uint64_t n = 256 * 256;
  const double rate = 4.0 * n / static_cast<double>(q4.max_payload_bytes(n)); // about 7.5
  cp::layer_policy p{.min_compression_rate = rate};
  CHECK(p.compressed(q4, info("w", shape))); // exactly at the rate: kept
  p.min_compression_rate = rate * 1.001;
  CHECK(p.decide(q4, info("w", shape)) == cp::layer_verdict::low_compression_rate);
  // A bf16 tensor has half the uncompressed bytes, so half the rate.
  p.min_compression_rate = rate / 2 * 1.001;
  CHECK(p.compressed(q4, info("w", shape)));
  CHECK(p.decide(q4, info("w", shape, cp::dtype::bf16)) == cp::layer_verdict::low_compression_rate);
  // identity sends the fp32 bytes and a header: a rate of 1 refuses it.
  const cp::pipeline<cp::none, cp::identity> plain{};
  CHECK(cp::layer_policy{.min_compression_rate = 1.0}.decide(plain, info("w", shape)) ==
        cp::layer_verdict::low_compression_rate);
}

TEST_CASE("glob_match: * and ? over names") {
  using cp::detail::glob_match;
  CHECK(glob_match("*", ""));
  CHECK(glob_match("*", "anything"));
  CHECK(glob_match("a*b*c", "aXXbYYc"));
  CHECK(glob_match("a*b*c", "abc"));
  CHECK_FALSE(glob_match("a*b*c", "acb"));
  CHECK(glob_match("layer?.weight", "layer1.weight"));
  CHECK_FALSE(glob_match("layer?.weight", "layer12.weight"));
  CHECK_FALSE(glob_match("", "x"));
  CHECK(glob_match("", ""));
  CHECK(glob_match("**.bias", "fc.bias"));
  CHECK_FALSE(glob_match("*.bias", "fc.bias.grad"));
  static_assert(glob_match("*.weight", "fc.weight"));
}
