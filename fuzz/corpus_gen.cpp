// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Writes the seed corpora of fuzz/corpus/ (run once; the files are checked in):
// - fuzz_decode: a valid payload of every configuration for a few sizes, in the raw and the
//   reseal mode, and truncated copies;
// - fuzz_encode: every configuration under every policy, on a tensor of every special value
//   (dictionary mode), on ordinary floats, and on half/bfloat16 bits;
// - fuzz_state_load: the blob of every state object, as is, resealed and truncated.
//
// Usage: commpress_fuzz_corpus_gen <fuzz/corpus directory>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "state_table.hpp"

namespace cp = commpress;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& file, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<float> ramp(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>((static_cast<int>(i * 37 % 23) - 11)) * 0.375f;
  return x;
}

void decode_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  for (std::size_t id = 0; id < cp::reliability::config_count; ++id) {
    cp::reliability::with_config(id, [&](const auto& c, bool) {
      for (const std::size_t n : {0u, 1u, 8u, 24u, 40u, 1000u}) {
        if (!c.can_implement(n))
          continue;
        if (n == 1000 && id != cp::reliability::codec_config_count - 1 &&
            id != cp::reliability::config_count - 1 && id % 4 != 0)
          continue;
        const std::vector<float> x = ramp(n);
        std::vector<std::byte> payload(cp::max_payload_bytes(c, n));
        std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n));
        const cp::encode_result r =
            cp::encode(cp::cpu::seq, c, cp::context{.seed = 5, .step = 2, .tensor_id = 1},
                       std::span<const float>(x), std::span(payload), std::span(ws));
        payload.resize(r.bytes); // a variable-length body (qsgd's Elias) is shorter
        for (const std::uint8_t mode : {0, 1, 2}) {
          std::vector<std::uint8_t> in = {static_cast<std::uint8_t>(id), mode};
          for (std::byte b : payload)
            in.push_back(static_cast<std::uint8_t>(b));
          const std::string stem =
              std::to_string(id) + "-n" + std::to_string(n) + "-m" + std::to_string(mode);
          write(dir / (stem + ".bin"), in);
          if (mode == 0 && n > 0) {
            in.resize(in.size() - 1);
            write(dir / (stem + "-truncated.bin"), in);
          }
        }
      }
    });
  }
}

void encode_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  for (std::size_t id = 0; id < cp::reliability::config_count; ++id) {
    const auto cfg = static_cast<std::uint8_t>(id);
    for (std::uint8_t policy = 0; policy < 3; ++policy) {
      // Every special value, in an order that puts NaN/Inf next to +-FLT_MAX and zeros.
      std::vector<std::uint8_t> in = {cfg, static_cast<std::uint8_t>(0x10 | policy | 0x20), 7};
      for (std::uint8_t v = 0; v < 32; ++v)
        in.push_back(static_cast<std::uint8_t>(v * 13 % 32));
      write(dir / (std::to_string(id) + "-special-p" + std::to_string(policy) + ".bin"), in);
    }
    // All zeros, then a constant tensor (dictionary mode, zero_and_count).
    write(dir / (std::to_string(id) + "-zeros.bin"),
          std::vector<std::uint8_t>{cfg, 0x11, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    write(dir / (std::to_string(id) + "-constant.bin"),
          std::vector<std::uint8_t>{cfg, 0x11, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2});
    // Ordinary f32 bits, then the same bits read as fp16 and bfloat16 elements.
    std::vector<std::uint8_t> raw = {cfg, 0x00, 3};
    for (const float f : ramp(32)) {
      std::uint8_t b[4];
      std::memcpy(b, &f, 4);
      raw.insert(raw.end(), b, b + 4);
    }
    write(dir / (std::to_string(id) + "-f32.bin"), raw);
    raw[1] = 0x04;
    write(dir / (std::to_string(id) + "-f16.bin"), raw);
    raw[1] = 0x08;
    write(dir / (std::to_string(id) + "-bf16.bin"), raw);
  }
}

void state_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  for (std::size_t id = 0; id < cp::reliability::state_count; ++id) {
    cp::reliability::with_state(id, [&](const auto& state) {
      const std::vector<std::byte> blob = cp::reliability::save_state(state);
      for (const std::uint8_t mode : {0, 1}) {
        std::vector<std::uint8_t> in = {static_cast<std::uint8_t>(id), mode};
        for (std::byte b : blob)
          in.push_back(static_cast<std::uint8_t>(b));
        write(dir / (std::to_string(id) + "-m" + std::to_string(mode) + ".bin"), in);
        in.resize(in.size() - 5);
        write(dir / (std::to_string(id) + "-m" + std::to_string(mode) + "-truncated.bin"), in);
      }
    });
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <fuzz/corpus directory>\n", argv[0]);
    return 2;
  }
  const fs::path root(argv[1]);
  decode_seeds(root / "fuzz_decode");
  encode_seeds(root / "fuzz_encode");
  state_seeds(root / "fuzz_state_load");
  return 0;
}
