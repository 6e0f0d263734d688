// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Fuzzes encoding of adversarial tensors (NaN, Inf, denormals, +-FLT_MAX, ties) for every codec
// configuration of codec_table.hpp, under every non-finite policy and element type.
//
// Input: byte 0 picks the configuration; byte 1: bits 0-1 the policy (3 = propagate), bits 2-3
// the element type (f32, f16, bf16; 3 = f32), bit 4 dictionary mode, bits 5-7 the step; byte 2
// the seed. The rest is the tensor: raw element bits, or in dictionary mode one byte per element
// picking a value from `special` (so nearly every input is hostile).
//
// Properties (any violation aborts):
// - an invalid configuration for n throws invalid_argument; otherwise
// - under `fail`, encode and roundtrip throw non_finite iff the tensor holds a NaN/Inf, and
//   leave the output bytes and the tensor untouched;
// - encode writes exactly max_payload_bytes (a variable-length body: at most that, and the
//   bytes it reports, those of the header's body_bytes), reports every non-finite element, and
//   writes the same bytes when called again (determinism);
// - zero_and_count writes the bytes propagate writes for the tensor with NaN/Inf replaced by 0;
// - the payload decodes; no NaN comes out of a finite tensor or under zero_and_count; under
//   propagate a dense codec (identity, cast, sign, quantize) decodes every NaN/Inf element to a
//   NaN/Inf;
// - roundtrip is bit-identical to decode(encode(x)) and reports the same non-finite count.

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "codec_table.hpp"

namespace cp = commpress;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan = std::numeric_limits<float>::quiet_NaN();
constexpr float special[32] = {
    0.0f,          -0.0f,    1.0f,     -1.0f,    nan,      -nan,      inf,        -inf,
    FLT_MAX,       -FLT_MAX, FLT_MIN,  -FLT_MIN, 1e-45f,   -1e-45f,   5.877e-39f, 0.5f,
    -0.5f,         1.5f,     2.5f,     65504.0f, 65520.0f, -65520.0f, 1e30f,      -1e-30f,
    5.9604645e-8f, 1.7e38f,  -1.7e38f, 0.1f,     3.0f,     -3.0f,     1.0000001f, 0x1.fffffep-2f,
};

void require(bool ok) {
  if (!ok)
    std::abort();
}

template <class T> bool same_bytes(std::span<const T> a, std::span<const T> b) {
  // memcmp's pointers must not be null, even for zero bytes.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

/// The tensor the input describes, as element type T.
template <class T>
std::vector<T> tensor_of(const std::uint8_t* data, std::size_t size, bool dictionary) {
  std::vector<T> x;
  if (dictionary) {
    for (std::size_t i = 0; i < size; ++i)
      x.push_back(cp::from_float<T>(special[data[i] % 32]));
    return x;
  }
  for (std::size_t i = 0; i + sizeof(T) <= size; i += sizeof(T)) {
    T v;
    std::memcpy(&v, data + i, sizeof(T));
    x.push_back(v);
  }
  return x;
}

/// Codecs that send every element: a NaN/Inf element decodes to a NaN/Inf under propagate.
template <class C>
constexpr bool dense =
    cp::block_scaled_codec<C> || std::is_same_v<C, cp::identity> || std::is_same_v<C, cp::cast> ||
    std::is_same_v<C, cp::sign> || std::is_same_v<C, cp::quantize>;

/// Encodes x into a fresh buffer of exactly max_payload_bytes with a misaligned workspace of
/// exactly workspace_bytes, so ASan sees any overrun; returns the bytes encode reports.
template <class C, class T>
std::vector<std::byte> encode_checked(const C& c, const cp::context& ctx, std::span<const T> x,
                                      std::size_t& nonfinite) {
  std::vector<std::byte> out(cp::max_payload_bytes(c, x.size()), std::byte{0xa5});
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()) + 1);
  const auto r = cp::encode(cp::cpu::seq, c, ctx, x, std::span(out), std::span(ws).subspan(1));
  if (cp::has_variable_body(c)) {
    require(r.bytes <= out.size());
    require(r.bytes == cp::format::header_bytes + cp::format::read_header(out.data()).body_bytes);
    out.resize(r.bytes);
  } else {
    require(r.bytes == out.size());
  }
  nonfinite = r.nonfinite;
  return out;
}

template <class C, class T>
void check(const C& c, const cp::context& ctx, const std::vector<T>& x) {
  const std::uint64_t n = x.size();
  std::vector<std::byte> out(cp::max_payload_bytes(c, n), std::byte{0x5a});
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, n) + 1);
  const std::span<const T> in(x);
  if (!c.can_implement(n)) {
    try {
      cp::encode(cp::cpu::seq, c, ctx, in, std::span(out), std::span(ws).subspan(1));
    } catch (const cp::error& e) {
      require(e.code() == cp::errc::invalid_argument);
      return;
    }
    std::abort();
  }

  std::size_t bad = 0;
  for (const T& v : x)
    bad += cp::detail::is_finite(cp::to_float(v)) ? 0u : 1u;

  std::vector<float> wide(n);
  for (std::size_t i = 0; i < n; ++i)
    wide[i] = cp::to_float(x[i]);
  if (ctx.on_nonfinite == cp::nonfinite_policy::fail && bad > 0) {
    const std::vector<std::byte> out_before = out;
    const std::vector<float> wide_before = wide;
    for (int call = 0; call < 2; ++call) {
      try {
        if (call == 0) {
          cp::encode(cp::cpu::seq, c, ctx, in, std::span(out), std::span(ws).subspan(1));
        } else {
          cp::roundtrip(cp::cpu::seq, c, ctx, std::span(wide), std::span(ws).subspan(1));
        }
        std::abort();
      } catch (const cp::error& e) {
        require(e.code() == cp::errc::non_finite);
      }
    }
    require(same_bytes<std::byte>(out, out_before));
    require(same_bytes<float>(wide, wide_before));
    return;
  }

  std::size_t reported = 0;
  const std::vector<std::byte> payload = encode_checked(c, ctx, in, reported);
  require(reported == bad);
  std::size_t again_reported = 0;
  require(same_bytes<std::byte>(encode_checked(c, ctx, in, again_reported), payload));

  if (ctx.on_nonfinite == cp::nonfinite_policy::zero_and_count) {
    std::vector<T> zeroed = x;
    for (T& v : zeroed)
      if (!cp::detail::is_finite(cp::to_float(v)))
        v = cp::from_float<T>(0.0f);
    cp::context plain = ctx;
    plain.on_nonfinite = cp::nonfinite_policy::propagate;
    std::size_t none = 0;
    require(
        same_bytes<std::byte>(encode_checked(c, plain, std::span<const T>(zeroed), none), payload));
    require(none == 0);
  }

  std::vector<float> decoded(n);
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(payload), std::span(decoded));
  const bool finite_in = bad == 0 || ctx.on_nonfinite == cp::nonfinite_policy::zero_and_count;
  for (std::size_t i = 0; i < n; ++i) {
    if (finite_in)
      require(decoded[i] == decoded[i]);
    if (!finite_in && dense<C> && !cp::detail::is_finite(wide[i]))
      require(!cp::detail::is_finite(decoded[i]));
  }

  std::vector<std::byte> rws(cp::workspace_bytes(cp::cpu::seq, c, n) + 1);
  const auto r = cp::roundtrip(cp::cpu::seq, c, ctx, std::span(wide), std::span(rws).subspan(1));
  require(r.nonfinite == bad);
  require(same_bytes<float>(wide, decoded));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3)
    return 0;
  const std::uint8_t flags = data[1];
  cp::context ctx;
  ctx.on_nonfinite = static_cast<cp::nonfinite_policy>((flags & 3) == 3 ? 0 : flags & 3);
  ctx.step = flags >> 5;
  ctx.seed = data[2];
  ctx.tensor_id = 3;
  const bool dictionary = (flags & 0x10) != 0;
  const std::uint8_t* body = data + 3;
  const std::size_t len = size - 3;
  cp::reliability::with_config(data[0], [&](const auto& c, bool) {
    switch ((flags >> 2) & 3) {
    case 1:
      check(c, ctx, tensor_of<cp::half>(body, len, dictionary));
      break;
    case 2:
      check(c, ctx, tensor_of<cp::bfloat16>(body, len, dictionary));
      break;
    default:
      check(c, ctx, tensor_of<float>(body, len, dictionary));
      break;
    }
  });
  return 0;
}
