// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// qsgd on the CPU backends: the kit's fixed-width body (backend/cpu/scaled.hpp), or the Elias
/// body of QSGD's coding (Alistarh et al., NeurIPS 2017, section 3.2; docs/wire-format.md,
/// "qsgd, Elias body").
///
/// The Elias body takes the fixed coding's codes, drawn by the kit's own put_codes (the same
/// group norms, levels, signs and random word per element), and writes each group's nonzero
/// levels as Elias-gamma(gap), the sign bit and Elias-gamma(level), closed by a gap that reaches
/// the group's end; so its decode equals the fixed body's, bit for bit. Its length depends on
/// the levels: encode reports it, and the header carries it (codec_ops.hpp).
///
/// Decode reads the stream twice: once to validate all of it (a gap past its group's end, a
/// level above s, a stream that ends early, bytes or bits after its end), throwing
/// commpress::error before any output is written, then to write the values. cpu::par runs the
/// Elias body as cpu::seq does (the stream is sequential; the bytes are the same).

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "commpress/backend/cpu/policy.hpp"
#include "commpress/backend/cpu/scaled.hpp"
#include "commpress/compress/qsgd.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/math.hpp"
#include "commpress/format/header.hpp"

namespace commpress {
namespace cpu::detail::qsgd_elias {

/// Each byte's bits in reverse order.
inline constexpr auto reversed_bytes = [] {
  std::array<std::uint8_t, 256> t{};
  for (unsigned b = 0; b < 256; ++b) {
    unsigned r = 0;
    for (unsigned k = 0; k < 8; ++k)
      r |= ((b >> k) & 1u) << (7 - k);
    t[b] = static_cast<std::uint8_t>(r);
  }
  return t;
}();

/// The low `count` bits of v (1 <= count <= 64, nothing above them) in reverse order.
inline std::uint64_t reverse_bits(std::uint64_t v, unsigned count) {
  if (count <= 8) // the common case: small levels and gaps
    return reversed_bytes[v] >> (8u - count);
  v = ((v >> 1) & 0x5555555555555555u) | ((v & 0x5555555555555555u) << 1);
  v = ((v >> 2) & 0x3333333333333333u) | ((v & 0x3333333333333333u) << 2);
  v = ((v >> 4) & 0x0f0f0f0f0f0f0f0fu) | ((v & 0x0f0f0f0f0f0f0f0fu) << 4);
  v = ((v >> 8) & 0x00ff00ff00ff00ffu) | ((v & 0x00ff00ff00ff00ffu) << 8);
  v = ((v >> 16) & 0x0000ffff0000ffffu) | ((v & 0x0000ffff0000ffffu) << 16);
  v = (v >> 32) | (v << 32);
  return v >> (64u - count);
}

/// Appends bits to a stream from a byte boundary, least significant bit first
/// (format/bit_packing.hpp's order); finish() writes a partial last byte, its high bits 0.
/// Nothing past the stream's own bytes is written: the rest of the payload's room stays as the
/// caller left it.
struct bit_writer {
  unsigned char* out;
  std::uint64_t pending = 0;
  unsigned held = 0;
  std::uint64_t bits = 0; ///< bits appended

  /// The longest put.
  static constexpr unsigned max_put = 32;

  /// The low `count` bits of v (nothing above them), count <= max_put. Writes four whole bytes
  /// at a time.
  COMMPRESS_FORCEINLINE void put(std::uint64_t v, unsigned count) {
    pending |= v << held;
    held += count;
    bits += count;
    if (held >= 32) {
      format::detail::store_le<std::uint32_t>(out, static_cast<std::uint32_t>(pending));
      out += 4;
      pending >>= 32;
      held -= 32;
    }
  }
  /// Elias-gamma(v), v >= 1: floor(log2 v) zero bits, then v's floor(log2 v) + 1 bits from the
  /// most significant (a 1) down.
  COMMPRESS_FORCEINLINE void gamma(std::uint64_t v) {
    const unsigned top = 63u - static_cast<unsigned>(std::countl_zero(v));
    if (2u * top + 1u <= max_put) {
      put(reverse_bits(v, top + 1u) << top, 2u * top + 1u);
      return;
    }
    for (unsigned z = top; z > 0;) {
      const unsigned k = z < 32u ? z : 32u;
      put(0, k);
      z -= k;
    }
    const std::uint64_t r = reverse_bits(v, top + 1u);
    if (top + 1u <= 32u) {
      put(r, top + 1u);
    } else {
      put(r & 0xffffffffu, 32u);
      put(r >> 32, top + 1u - 32u);
    }
  }
  void finish() {
    for (; held > 0; held = held > 8 ? held - 8 : 0) {
      *out++ = static_cast<unsigned char>(pending);
      pending >>= 8;
    }
    pending = 0;
  }
};

/// Takes each group's codes in element order (the kit's put_codes writer) and appends each
/// nonzero level's entry: Elias-gamma(gap), sign bit, Elias-gamma(level). Positions count from
/// 1 in the group; the gap is from the previous nonzero's position (0 before the first). The
/// fixed coding gives a level 0 no sign, so its code is 0 and every other code is an entry.
template <unsigned Bits> struct group_writer {
  bit_writer w;
  std::uint64_t position = 0; ///< of the last code taken
  std::uint64_t previous = 0; ///< position of the last nonzero level

  void start_group() {
    position = 0;
    previous = 0;
  }

  COMMPRESS_FORCEINLINE void put(std::uint32_t code) {
    ++position;
    if (code != 0)
      put_entry(code);
  }
  /// 64 codes, one per byte, with the mask of the nonzero ones (bit j for code j). Only those
  /// are visited: none in most of a sparse group, and no branch on each code in a dense one.
  /// The writing goes through a local copy: the stream's stores cannot alias a local whose
  /// address they never see, so its state stays in registers.
  COMMPRESS_FORCEINLINE void put_64(const std::uint8_t* codes, std::uint64_t nonzero) {
    const std::uint64_t first = position;
    if (nonzero != 0) {
      group_writer local = *this;
      for (; nonzero != 0; nonzero &= nonzero - 1u) {
        const unsigned j = static_cast<unsigned>(std::countr_zero(nonzero));
        local.position = first + j + 1u;
        local.put_entry(codes[j]);
      }
      *this = local;
    }
    position = first + 64;
  }
  /// The entry of a nonzero code at `position`.
  COMMPRESS_FORCEINLINE void put_entry(std::uint32_t code) {
    const std::uint64_t gap = position - previous;
    previous = position;
    const std::uint32_t level = code & qsgd<Bits>::max_levels;
    const unsigned level_top = 31u - static_cast<unsigned>(std::countl_zero(level));
    // The sign, then gamma(level).
    const std::uint64_t tail =
        (code >> (Bits - 1)) | (reverse_bits(level, level_top + 1u) << level_top) << 1;
    const unsigned tail_bits = 2u * level_top + 2u;
    const unsigned gap_top = 63u - static_cast<unsigned>(std::countl_zero(gap));
    const unsigned gap_bits = 2u * gap_top + 1u;
    if (gap_bits + tail_bits <= bit_writer::max_put) { // the common case: the entry in one put
      w.put((reverse_bits(gap, gap_top + 1u) << gap_top) | tail << gap_bits, gap_bits + tail_bits);
      return;
    }
    w.gamma(gap);
    w.put(tail, tail_bits);
  }
  /// The closing gap, to position m + 1 of a group of m elements.
  void close() { w.gamma(position + 1 - previous); }
};

/// Encodes x[0, n) (n > 0) as the Elias body at `body`; sets `written` to its bytes and
/// returns the NaN/Inf count.
template <unsigned Bits, element T>
std::size_t encode(const qsgd<Bits>& c, nonfinite_policy policy, const scaled_kit::random_source& r,
                   const T* x, std::uint64_t n, unsigned char* body, std::uint64_t& written) {
  using C = qsgd<Bits>;
  const scaled_kit::layout<C> l(c, n, body);
  group_writer<Bits> gw{bit_writer{l.codes(c)}};
  std::size_t bad = 0;
  for (std::uint64_t g = 0; g < scaled::n_groups(c, n); ++g) {
    const std::uint64_t first = g * l.length;
    const std::uint64_t last = std::min(n, first + l.length);
    const scaled_kit::measured_group m = scaled_kit::measure_group(c, x, first, last, n);
    bad += m.st.nonfinite;
    const bool poisoned = m.st.nonfinite != 0 && policy == nonfinite_policy::propagate;
    const float s = poisoned ? C::poisoned_scale : c.make_scale(m.g, no_tensor_scale{});
    l.store_scale(g, s);
    gw.start_group();
    scaled_kit::put_codes(c, x, first, last, poisoned,
                          poisoned ? typename C::encoder{} : c.make_encoder(s, no_tensor_scale{}),
                          r, gw);
    gw.close();
  }
  gw.w.finish();
  written = scaled::codes_offset(c, n) + (gw.w.bits + 7u) / 8u;
  return bad;
}

/// Reads a stream of `bytes` bytes, least significant bit first; every read past its end
/// throws errc::corrupt. `pending` holds the next `held` bits, nothing above them.
struct bit_reader {
  const unsigned char* begin;
  const unsigned char* p;
  const unsigned char* end;
  std::uint64_t pending = 0;
  unsigned held = 0;

  [[noreturn]] static void refuse(const std::string& why) {
    ::commpress::detail::throw_error(errc::corrupt, "qsgd", "Elias body: " + why);
  }
  /// Tops `pending` up to at least 56 bits, or to the stream's end; called with fewer than 32
  /// bits held. Away from the end, one 8-byte load takes the whole bytes that fit, without a
  /// loop: the chain that serialises decoding is the shift after each code, and a loop on
  /// `held` would lengthen it.
  COMMPRESS_FORCEINLINE void refill() {
    if (end - p >= 8) {
      const std::uint64_t next = format::detail::load_le<std::uint64_t>(p);
      const unsigned now = held | 56u;
      pending |= (next << held) & ((std::uint64_t{1} << now) - 1u);
      p += (now - held) / 8u;
      held = now;
      return;
    }
    while (held <= 56u && p < end) {
      pending |= static_cast<std::uint64_t>(*p++) << held;
      held += 8;
    }
  }
  /// Drops `count` bits (count <= held).
  COMMPRESS_FORCEINLINE void skip(unsigned count) {
    pending >>= count;
    held -= count;
  }
  /// `count` bits, count <= 32.
  COMMPRESS_FORCEINLINE std::uint64_t get(unsigned count) {
    if (held < count) {
      refill();
      if (held < count)
        refuse("the stream ends inside a code");
    }
    const std::uint64_t v = pending & ((std::uint64_t{1} << count) - 1u);
    skip(count);
    return v;
  }
  /// An Elias-gamma code (at most 127 bits: a value below 2^64).
  COMMPRESS_FORCEINLINE std::uint64_t gamma() {
    if (held < 32)
      refill();
    if (pending != 0) { // the common case: the whole code is in `pending`
      const unsigned z = static_cast<unsigned>(std::countr_zero(pending));
      if (2 * z + 1 <= held) {
        const std::uint64_t r = (pending >> z) & ((std::uint64_t{2} << z) - 1u);
        skip(2 * z + 1);
        return reverse_bits(r, z + 1);
      }
    }
    return long_gamma();
  }
  /// gamma() for a code longer than the bits at hand. Inlined too, so that a reader kept in
  /// registers stays there.
  COMMPRESS_FORCEINLINE std::uint64_t long_gamma() {
    unsigned zeros = 0;
    for (;;) {
      if (held == 0) {
        refill();
        if (held == 0)
          refuse("the stream ends inside a code");
      }
      if (pending != 0) {
        const unsigned z = static_cast<unsigned>(std::countr_zero(pending));
        zeros += z;
        skip(z);
        break;
      }
      zeros += held;
      held = 0;
      if (zeros > 63u)
        refuse("an Elias-gamma code of more than 64 bits");
    }
    if (zeros > 63u)
      refuse("an Elias-gamma code of more than 64 bits");
    const unsigned count = zeros + 1u;
    std::uint64_t r = get(count < 32u ? count : 32u);
    if (count > 32u)
      r |= get(count - 32u) << 32;
    return reverse_bits(r, count);
  }
  std::uint64_t bits_read() const { return 8u * static_cast<std::uint64_t>(p - begin) - held; }
};

/// A whole entry, gamma(gap), sign and gamma(level), read from the stream's next
/// `entry_table_bits` bits by one lookup, where it fits in them: the common case, small gaps and
/// levels. Each slot packs the entry's bit length (0: it does not fit, or its level does not fit
/// the codes), the gap and the entry's code, (sign << (Bits - 1)) | level; the gap and the level
/// are below 32, since each of their codes is at most 10 bits.
inline constexpr unsigned entry_table_bits = 12;
static_assert(entry_table_bits <= 12, "a slot's 4-bit length and 5-bit gap hold entries of at "
                                      "most 12 bits, whose gap codes are at most 10 bits");
struct table_entry {
  static constexpr unsigned length(std::uint32_t e) { return e & 15u; }
  static constexpr unsigned gap(std::uint32_t e) { return (e >> 4) & 31u; }
  static constexpr std::uint32_t code(std::uint32_t e) { return e >> 9; }
};
/// The table for codes of Bits bits, built on first use. A template, so that only a translation
/// unit that decodes an Elias body compiles it: as a constant expression, or as an inline
/// function, it cost every translation unit that includes this header.
template <unsigned Bits>
const std::array<std::uint32_t, std::size_t{1} << entry_table_bits>& entry_table() {
  static const auto table = [] {
    std::array<std::uint32_t, std::size_t{1} << entry_table_bits> t{};
    // Reads gamma at bit `at` of b: its value, and `at` moved past it; 0 where it runs past the
    // table's bits.
    const auto gamma_at = [](unsigned b, unsigned& at) -> unsigned {
      unsigned z = 0;
      while (at + z < entry_table_bits && ((b >> (at + z)) & 1u) == 0)
        ++z;
      if (at + 2 * z + 1 > entry_table_bits)
        return 0;
      unsigned v = 0;
      for (unsigned k = 0; k <= z; ++k)
        v = v << 1 | ((b >> (at + z + k)) & 1u);
      at += 2 * z + 1;
      return v;
    };
    for (unsigned b = 0; b < t.size(); ++b) {
      unsigned at = 0;
      const unsigned gap = gamma_at(b, at);
      if (gap == 0 || at >= entry_table_bits)
        continue;
      const unsigned sign = (b >> at) & 1u;
      ++at;
      const unsigned level = gamma_at(b, at);
      if (level == 0 || level > qsgd<Bits>::max_levels)
        continue;
      t[b] = at | gap << 4 | (sign << (Bits - 1) | level) << 9;
    }
    return t;
  }();
  return table;
}

/// Reads the Elias stream of an n-element body (n > 0) of `body_bytes` bytes, group by group:
/// sink.zeros(first, last, d) for the elements of level 0, sink.value(i, code, d) for the
/// others, d the group's decoder. Throws errc::corrupt, with nothing handed to the sink after,
/// where the stream is not one the encoder writes.
///
/// The stream is one chain of dependent reads, an entry's position known only once the previous
/// entry is read, so its speed is that chain's: the reader's state stays in registers (every
/// read is inlined, so its address never escapes), and one compare per entry finds both the
/// closing gap and a gap past the group's end.
template <unsigned Bits, class Sink>
void read_body(const qsgd<Bits>& c, std::uint64_t n, const unsigned char* body,
               std::uint64_t body_bytes, Sink sink) {
  using C = qsgd<Bits>;
  const scaled_kit::layout<C, const unsigned char> l(c, n, body);
  const std::uint64_t stream_at = scaled::codes_offset(c, n);
  if (body_bytes < stream_at)
    bit_reader::refuse("the body ends inside the group norms");
  const unsigned char* stream = l.codes(c);
  bit_reader r{stream, stream, stream + (body_bytes - stream_at)};
  const std::uint32_t* const entries = entry_table<Bits>().data();
  constexpr std::uint64_t table_mask = (std::uint64_t{1} << entry_table_bits) - 1u;
  const std::uint32_t levels = c.levels;
  const auto gap_past_end = [](std::uint64_t g) {
    bit_reader::refuse("a gap past the end of group " + std::to_string(g));
  };
  const auto level_above_s = [levels](std::uint64_t g) {
    bit_reader::refuse("a level above s = " + std::to_string(levels) + " in group " +
                       std::to_string(g));
  };
  for (std::uint64_t g = 0; g < scaled::n_groups(c, n); ++g) {
    const std::uint64_t first = g * l.length;
    const std::uint64_t close = std::min(n, first + l.length) - first + 1; // the closing position
    const typename C::decoder d = c.make_decoder(l.load_scale(g), no_tensor_scale{});
    std::uint64_t at = 0; // position of the last nonzero level, counted from 1
    for (;;) {
      if (r.held < entry_table_bits)
        r.refill();
      const std::uint32_t e = entries[r.pending & table_mask];
      const unsigned length = table_entry::length(e);
      std::uint64_t gap = 0;
      std::uint32_t code = 0;
      if (length - 1u < r.held) { // a whole entry in the table (length 0 wraps around)
        gap = table_entry::gap(e);
        if (gap < close - at) {
          r.skip(length);
          code = table_entry::code(e);
        } else { // the closing gap, or one past it: the bits after it are the next group's
          if (gap > close - at)
            gap_past_end(g);
          r.skip(static_cast<unsigned>(elias_gamma_bits(gap)));
        }
      } else {
        gap = r.gamma();
        if (gap > close - at)
          gap_past_end(g);
        if (gap < close - at) {
          const std::uint64_t sign = r.get(1);
          const std::uint64_t level = r.gamma();
          if (level > levels)
            level_above_s(g);
          code = static_cast<std::uint32_t>(sign << (Bits - 1) | level);
        }
      }
      sink.zeros(first + at, first + at + gap - 1, d);
      at += gap;
      if (at == close)
        break;
      if ((code & C::max_levels) > levels)
        level_above_s(g);
      sink.value(first + at - 1, code, d);
    }
  }
  const std::uint64_t bits = r.bits_read();
  const std::uint64_t used = (bits + 7u) / 8u;
  if (used != body_bytes - stream_at)
    bit_reader::refuse("bytes after the end of the stream");
  if (bits % 8u != 0 && (stream[used - 1] >> (bits % 8u)) != 0)
    bit_reader::refuse("nonzero bits after the end of the stream");
}

/// Validates the whole body, then writes out = value (or out += weight * value when
/// Accumulate), each element's value decode_value(code, d) as the fixed body's.
template <bool Accumulate, unsigned Bits, class T>
void decode(const qsgd<Bits>& c, std::uint64_t body_bytes, const unsigned char* body,
            std::span<T> out, float weight) {
  const std::uint64_t n = out.size();
  if (n == 0)
    return;
  struct validate_only {
    void zeros(std::uint64_t, std::uint64_t, float) const {}
    void value(std::uint64_t, std::uint32_t, float) const {}
  };
  read_body(c, n, body, body_bytes, validate_only{});
  // The writer holds its pointer and configuration by value: a sink reached through references
  // would reload them after each store.
  struct writer {
    qsgd<Bits> c;
    T* out;
    float weight;
    COMMPRESS_FORCEINLINE void put(std::uint64_t i, float v) const {
      if constexpr (Accumulate) {
        out[i] = commpress::detail::add_rn(out[i], commpress::detail::mul_rn(weight, v));
      } else {
        out[i] = from_float<T>(v);
      }
    }
    COMMPRESS_FORCEINLINE void zeros(std::uint64_t a, std::uint64_t b, float d) const {
      const float z = c.decode_value(0, d);
      for (std::uint64_t i = a; i < b; ++i)
        put(i, z);
    }
    COMMPRESS_FORCEINLINE void value(std::uint64_t i, std::uint32_t code, float d) const {
      put(i, c.decode_value(code, d));
    }
  };
  read_body(c, n, body, body_bytes, writer{c, out.data(), weight});
}

} // namespace cpu::detail::qsgd_elias

namespace detail {

/// qsgd under a host policy: the fixed-width body through the kit's implementation for that
/// policy (Kit: scaled_seq_impl, or scaled_par_impl over ranges); the Elias body, one
/// sequential stream, the same under every policy.
template <class C, class Policy, class Kit> struct qsgd_host_impl {
  /// The host backend contract's flags (codec_ops.hpp, detail::host_codec_impl): roundtrip encodes
  /// into the workspace and decodes.
  static constexpr bool hashes_body = false;
  static constexpr bool custom_roundtrip = false;

  static std::uint64_t workspace_bytes(const C&, std::uint64_t) { return 0; }

  template <element T>
  static std::size_t encode_body(const Policy& p, const C& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws, std::uint64_t& written) {
    if (c.coding != qsgd_coding::elias) {
      written = c.body_bytes(in.size());
      return Kit::encode_body(p, c, ctx, in, body, ws);
    }
    written = 0;
    if (in.empty())
      return 0;
    return cpu::detail::qsgd_elias::encode(c, ctx.on_nonfinite,
                                           cpu::detail::scaled_kit::random_source::of(ctx),
                                           in.data(), in.size(), body, written);
  }
  template <element T>
  static std::size_t encode_body(const Policy& p, const C& c, const context& ctx,
                                 std::span<const T> in, unsigned char* body,
                                 std::span<std::byte> ws) {
    // The contract's fixed-length form (codec_ops.hpp): encode() takes the sized one for qsgd,
    // and an Elias body's length would be lost here.
    COMMPRESS_EXPECTS(c.coding != qsgd_coding::elias, errc::invalid_argument, "qsgd",
                      "the Elias body varies in length: encode it through encode()");
    std::uint64_t written = 0;
    return encode_body(p, c, ctx, in, body, ws, written);
  }

  template <element T>
  static void decode_body(const Policy& p, const C& c, const payload_header& h,
                          const unsigned char* body, std::span<T> out) {
    if (c.coding != qsgd_coding::elias)
      return Kit::decode_body(p, c, h, body, out);
    cpu::detail::qsgd_elias::decode<false>(c, h.body_bytes, body, out, 1.0f);
  }

  static void accumulate_body(const Policy& p, const C& c, const payload_header& h,
                              const unsigned char* body, std::span<float> acc, float weight) {
    if (c.coding != qsgd_coding::elias)
      return Kit::accumulate_body(p, c, h, body, acc, weight);
    cpu::detail::qsgd_elias::decode<true>(c, h.body_bytes, body, acc, weight);
  }
};

template <unsigned Bits>
struct codec_impl<qsgd<Bits>, cpu::seq_t>
    : qsgd_host_impl<qsgd<Bits>, cpu::seq_t, scaled_seq_impl<qsgd<Bits>>> {};

template <unsigned Bits>
struct codec_impl<qsgd<Bits>, cpu::par_t>
    : qsgd_host_impl<qsgd<Bits>, cpu::par_t, scaled_par_impl<qsgd<Bits>>> {};

} // namespace detail
} // namespace commpress
