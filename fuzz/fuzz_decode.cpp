// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Fuzzes payload decoding for every codec configuration of codec_table.hpp.
//
// Input: byte 0 picks the configuration, byte 1 the mode, the rest is the payload.
// - mode bit 0 clear: the payload is decoded as given, with an output sized by its header's
//   element count (so the fuzzer can reach a matching size) or by byte 1.
// - mode bit 0 set ("reseal"): the header is rewritten to be valid for this configuration
//   (magic, version, codec, params, count, body length) and the checksum recomputed, so the
//   body parser sees arbitrary bytes: hostile indices, NaN scales, stray bitmap bits.
// - mode bits 1-2: the output element type of decode (f32, f16, bf16).
//
// Properties (any violation aborts):
// - decode and decode_accumulate either succeed or throw commpress::error, never crash;
// - on error the output (and the accumulator) is bit-identical to before the call;
// - both accept or both refuse the same payload, and decode_accumulate with weight 1 into
//   zeros gives the values decode wrote (NaN for NaN).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "codec_table.hpp"

namespace cp = commpress;

namespace {

constexpr std::uint64_t max_elements = 1 << 16;

template <class T> bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  // memcmp's pointers must not be null, even for zero bytes.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

void require(bool ok) {
  if (!ok)
    std::abort();
}

/// Makes `payload` a valid envelope for codec c and n elements around whatever body it holds.
/// A variable-length body (qsgd's Elias coding) keeps the input's length, up to the largest,
/// so that a real stream, almost always shorter than the worst case, stays decodable.
template <class C> void reseal(const C& c, std::uint64_t n, std::vector<std::byte>& payload) {
  std::uint64_t body = c.body_bytes(n);
  if (cp::has_variable_body(c) && payload.size() >= cp::format::header_bytes)
    body = std::min<std::uint64_t>(body, payload.size() - cp::format::header_bytes);
  payload.resize(cp::format::header_bytes + body);
  cp::payload_header h = cp::format::read_header(payload.data());
  h.codec = C::id;
  h.element = cp::dtype::f32;
  h.count = n;
  h.body_bytes = body;
  h.params = c.params();
  cp::format::write_header(h, payload.data());
  cp::format::seal(payload, body);
}

/// Decodes `payload` into an output of type T filled with a sentinel, then checks the contract.
template <class C, class T>
void check(const C& c, std::span<const std::byte> payload, std::uint64_t n) {
  std::vector<T> out(n, cp::from_float<T>(-7.25f));
  const std::vector<T> before = out;
  bool decoded = false;
  try {
    cp::decode(cp::cpu::seq, c, payload, std::span<T>(out));
    decoded = true;
  } catch (const cp::error&) {
    require(same_bytes(out, before));
  }

  std::vector<float> acc(n, 0.0f);
  const std::vector<float> acc_before = acc;
  bool accumulated = false;
  try {
    cp::decode_accumulate(cp::cpu::seq, c, payload, std::span<float>(acc), 1.0f);
    accumulated = true;
  } catch (const cp::error&) {
    require(same_bytes(acc, acc_before));
  }
  require(decoded == accumulated);
  if (!decoded)
    return;
  for (std::size_t i = 0; i < n; ++i) {
    const float d = cp::to_float(out[i]);
    const float a = cp::to_float(cp::from_float<T>(acc[i])); // same rounding as decode's output
    require(d == a || (d != d && a != a));
  }
}

template <class C> void run(const C& c, std::uint8_t mode, std::vector<std::byte>& payload) {
  std::uint64_t n = mode >> 3;
  if (payload.size() >= cp::format::header_bytes) {
    const std::uint64_t count = cp::format::read_header(payload.data()).count;
    n = (mode & 1) != 0 ? count % 1024 : count % max_elements;
  }
  if ((mode & 1) != 0) {
    if (!c.can_implement(n))
      return;
    reseal(c, n, payload);
  }
  const std::span<const std::byte> p(payload);
  switch ((mode >> 1) % 3) {
  case 0:
    check<C, float>(c, p, n);
    break;
  case 1:
    check<C, cp::half>(c, p, n);
    break;
  default:
    check<C, cp::bfloat16>(c, p, n);
    break;
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2)
    return 0;
  const std::uint8_t config = data[0];
  const std::uint8_t mode = data[1];
  std::vector<std::byte> payload(size - 2);
  if (!payload.empty())
    std::memcpy(payload.data(), data + 2, payload.size());
  cp::reliability::with_config(config, [&](const auto& c, bool) { run(c, mode, payload); });
  return 0;
}
