// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The payload checksum (format/header.hpp) computed in parallel on the device.
///
/// The checksum is CRC32C(header[0..60) ++ le(crc_0) ++ ... ++ le(crc_{m-1})), crc_c being the
/// CRC32C of 64 KiB body chunk c. CRC32C of a concatenation obeys
///   crc(A ++ B) = shift(crc(A), |B|) XOR crc(B),
/// where shift(v, L) multiplies v by x^(8L) modulo the polynomial (zlib's crc32_combine). So
/// every thread hashes its own piece of a chunk, shifts the result past the bytes that follow
/// the piece in its chunk, and the block XORs the pieces into crc_c; each chunk then shifts
/// CRC32C(le(crc_c)) past the 4(m - 1 - c) bytes after it and XORs that into one word with an
/// atomic. XOR is order-free, so the result is deterministic and needs no per-chunk storage;
/// a single thread finally adds shift(CRC32C(header[0..60)), 4m).
///
/// The arithmetic helpers are host-device so the host tests can check the decomposition
/// against format::payload_checksum without a GPU.

#include <cuda_runtime.h>

#include <cstdint>

#include "commpress/backend/cuda/detail/common.cuh"
#include "commpress/core/config.hpp"
#include "commpress/format/crc32c.hpp"
#include "commpress/format/header.hpp"

namespace commpress::cuda::detail {

inline constexpr std::uint32_t crc_poly = 0x82F63B78u; // reflected CRC32C polynomial

/// a * b modulo the CRC polynomial, in the reflected bit order (bit 31 is x^0).
COMMPRESS_HOST_DEVICE constexpr std::uint32_t crc_multmodp(std::uint32_t a, std::uint32_t b) {
  std::uint32_t m = 1u << 31;
  std::uint32_t p = 0;
  while (a != 0) {
    if (a & m) {
      p ^= b;
      a ^= m;
    }
    m >>= 1;
    b = (b & 1u) ? (b >> 1) ^ crc_poly : b >> 1;
  }
  return p;
}

/// x^(2^k) modulo the polynomial for k = 0..63, passed by value to the kernels (128 bytes of
/// kernel parameters: uniform, cached reads).
struct crc_powers {
  std::uint32_t x2n[64];
};

constexpr crc_powers make_crc_powers() {
  crc_powers t{};
  t.x2n[0] = 1u << 30; // x^1
  for (int k = 1; k < 64; ++k)
    t.x2n[k] = crc_multmodp(t.x2n[k - 1], t.x2n[k - 1]);
  return t;
}

inline constexpr crc_powers crc_powers_table = make_crc_powers();

/// shift(v, bytes): the CRC register v after `bytes` more zero bytes (v * x^(8 bytes)).
COMMPRESS_HOST_DEVICE inline std::uint32_t crc_shift(std::uint32_t v, std::uint64_t bytes,
                                                     const crc_powers& t) {
  std::uint32_t p = 1u << 31; // x^0
  for (int k = 3; bytes != 0 && k < 64; bytes >>= 1, ++k)
    if (bytes & 1u)
      p = crc_multmodp(t.x2n[k], p);
  return crc_multmodp(p, v);
}

/// CRC32C continued over `len` bytes one bit at a time (no table; for the 60 header bytes).
COMMPRESS_HOST_DEVICE inline std::uint32_t crc_bitwise(std::uint32_t crc, const unsigned char* p,
                                                       std::uint64_t len) {
  std::uint32_t c = ~crc;
  for (std::uint64_t i = 0; i < len; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k)
      c = (c & 1u) ? (c >> 1) ^ crc_poly : c >> 1;
  }
  return ~c;
}

/// CRC32C of `len` bytes with slicing-by-8 tables `t` (8 x 256 words, flat), any alignment.
COMMPRESS_HOST_DEVICE inline std::uint32_t crc_sliced(const unsigned char* p, std::uint64_t len,
                                                      const std::uint32_t* t) {
  std::uint32_t c = ~0u;
  for (; len > 0 && reinterpret_cast<std::uintptr_t>(p) % 8 != 0; --len, ++p)
    c = (c >> 8) ^ t[(c ^ *p) & 0xffu];
  for (; len >= 8; len -= 8, p += 8) {
    const std::uint64_t w = *reinterpret_cast<const std::uint64_t*>(p); // little-endian
    const std::uint32_t lo = c ^ static_cast<std::uint32_t>(w);
    const auto hi = static_cast<std::uint32_t>(w >> 32);
    c = t[7 * 256 + (lo & 0xffu)] ^ t[6 * 256 + ((lo >> 8) & 0xffu)] ^
        t[5 * 256 + ((lo >> 16) & 0xffu)] ^ t[4 * 256 + (lo >> 24)] ^ t[3 * 256 + (hi & 0xffu)] ^
        t[2 * 256 + ((hi >> 8) & 0xffu)] ^ t[1 * 256 + ((hi >> 16) & 0xffu)] ^ t[hi >> 24];
  }
  for (; len > 0; --len, ++p)
    c = (c >> 8) ^ t[(c ^ *p) & 0xffu];
  return ~c;
}

/// Bytes of body each thread of a chunk block hashes: a 64 KiB chunk over 256 threads.
inline constexpr std::uint64_t crc_piece_bytes = format::checksum_chunk_bytes / block_threads;

/// Number of checksum chunks of a body.
COMMPRESS_HOST_DEVICE constexpr std::uint64_t crc_chunks(std::uint64_t body_bytes) {
  return (body_bytes + format::checksum_chunk_bytes - 1) / format::checksum_chunk_bytes;
}

/// Contribution of piece `piece` (crc `piece_crc`) to the CRC of a chunk of `chunk_len` bytes.
COMMPRESS_HOST_DEVICE inline std::uint32_t
piece_term(std::uint32_t piece_crc, unsigned piece, std::uint64_t chunk_len, const crc_powers& t) {
  const std::uint64_t end = (piece + 1) * crc_piece_bytes;
  return crc_shift(piece_crc, end < chunk_len ? chunk_len - end : 0, t);
}

/// Contribution of chunk c (crc `chunk_crc`) of m to the payload checksum.
COMMPRESS_HOST_DEVICE inline std::uint32_t chunk_term(std::uint32_t chunk_crc, std::uint64_t c,
                                                      std::uint64_t m, const crc_powers& t) {
  const unsigned char le[4] = {
      static_cast<unsigned char>(chunk_crc), static_cast<unsigned char>(chunk_crc >> 8),
      static_cast<unsigned char>(chunk_crc >> 16), static_cast<unsigned char>(chunk_crc >> 24)};
  return crc_shift(crc_bitwise(0, le, 4), 4 * (m - 1 - c), t);
}

/// The payload checksum from the header bytes and the XOR of the chunk terms.
COMMPRESS_HOST_DEVICE inline std::uint32_t payload_crc(const unsigned char* header, std::uint64_t m,
                                                       std::uint32_t chunk_xor,
                                                       const crc_powers& t) {
  return crc_shift(crc_bitwise(0, header, format::field::crc), 4 * m, t) ^ chunk_xor;
}

/// Hashes the body chunks into ctrl->crc (see the file comment). The body length is
/// `body_bytes`, or, when `d_header` is given (decoding), the length the header declares if it
/// is at most `body_bytes` (the bytes present); otherwise there is nothing to hash and
/// validation reports the truncation.
template <class Unused = void>
COMMPRESS_KERNEL void __launch_bounds__(block_threads)
    chunk_crc_kernel(const unsigned char* body, const unsigned char* d_header,
                     std::uint64_t body_bytes, crc_powers t, control* ctrl) {
  __shared__ std::uint32_t table[8 * 256];
  __shared__ std::uint32_t warp_xor[block_threads / 32];
  std::uint64_t len = body_bytes;
  if (d_header != nullptr) {
    const std::uint64_t declared = load_word<std::uint64_t>(d_header + format::field::body_bytes);
    len = declared <= body_bytes ? declared : 0;
  }
  const std::uint64_t m = crc_chunks(len);
  if (blockIdx.x >= m)
    return; // uniform per block: before any barrier
  {
    std::uint32_t c = threadIdx.x;
    for (int k = 0; k < 8; ++k)
      c = (c & 1u) ? (c >> 1) ^ crc_poly : c >> 1;
    table[threadIdx.x] = c;
    __syncthreads();
    for (int s = 1; s < 8; ++s) {
      const std::uint32_t prev = table[(s - 1) * 256 + threadIdx.x];
      table[s * 256 + threadIdx.x] = (prev >> 8) ^ table[prev & 0xffu];
      __syncthreads();
    }
  }
  for (std::uint64_t chunk = blockIdx.x; chunk < m; chunk += gridDim.x) {
    const std::uint64_t first = chunk * format::checksum_chunk_bytes;
    const std::uint64_t chunk_len =
        len - first < format::checksum_chunk_bytes ? len - first : format::checksum_chunk_bytes;
    const std::uint64_t lo = threadIdx.x * crc_piece_bytes;
    std::uint32_t term = 0;
    if (lo < chunk_len) {
      const std::uint64_t hi = lo + crc_piece_bytes < chunk_len ? lo + crc_piece_bytes : chunk_len;
      term = piece_term(crc_sliced(body + first + lo, hi - lo, table), threadIdx.x, chunk_len, t);
    }
    term = __reduce_xor_sync(0xffffffffu, term);
    if ((threadIdx.x & 31u) == 0)
      warp_xor[threadIdx.x / 32] = term;
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint32_t chunk_crc = 0;
      for (unsigned w = 0; w < block_threads / 32; ++w)
        chunk_crc ^= warp_xor[w];
      atomicXor(&ctrl->crc, chunk_term(chunk_crc, chunk, m, t));
    }
    __syncthreads();
  }
}

/// Launches chunk_crc_kernel on `stream` (nothing to launch for an empty bound).
inline void launch_chunk_crc(const unsigned char* body, const unsigned char* d_header,
                             std::uint64_t body_bytes, control* ctrl, cudaStream_t stream) {
  const std::uint64_t m = crc_chunks(body_bytes);
  if (m == 0)
    return;
  const unsigned grid = static_cast<unsigned>(m < max_blocks ? m : max_blocks);
  chunk_crc_kernel<<<grid, block_threads, 0, stream>>>(body, d_header, body_bytes, crc_powers_table,
                                                       ctrl);
  check_launch();
}

} // namespace commpress::cuda::detail
