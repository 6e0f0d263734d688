// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Every instruction-set feature macro of the CPU code, decided once from the compiler's target
/// flags (`-march=...`), so that the kernels ask one vocabulary:
/// - COMMPRESS_SIMD_AVX512: AVX-512 F, BW and VL (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4
///   and later); the vector layer (backend/cpu/detail/simd.hpp) runs 16 fp32 lanes.
/// - COMMPRESS_SIMD_AVX2: AVX2 without those (Haswell to Alder Lake client cores, Zen 1-3);
///   8 lanes.
/// - COMMPRESS_SIMD_PORTABLE: neither; the vector layer is plain C++ over arrays that the
///   compiler vectorizes for what its flags allow (SSE2 on x86-64, NEON on AArch64).
/// - COMMPRESS_SIMD_SSE2: SSE2, which the portable layer uses for its lane masks, min, max and
///   truncation to integers.
/// - COMMPRESS_SIMD_F16C: a hardware fp32 -> fp16 conversion of a whole vector (AVX-512F, or F16C
///   with AVX2).
/// - COMMPRESS_CRC32C_X86: x86-64 under GCC or Clang; the CRC32C instructions are chosen at run
///   time (format/crc32c.hpp), so they need no flag.
/// - COMMPRESS_CRC32C_STREAMING: the flags also enable VPCLMULQDQ with AVX-512, so a kernel can
///   hash what it writes from its registers (format/crc32c.hpp, crc32c_streaming).
/// - COMMPRESS_CRC32C_ARM: the AArch64 CRC extension.
/// COMMPRESS_SIMD_NAME names the vector layer's instruction set (the tests report it).

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define COMMPRESS_SIMD_AVX512 1
#define COMMPRESS_SIMD_NAME "avx512"
#elif defined(__AVX2__)
#define COMMPRESS_SIMD_AVX2 1
#define COMMPRESS_SIMD_NAME "avx2"
#else
#define COMMPRESS_SIMD_PORTABLE 1
#define COMMPRESS_SIMD_NAME "portable"
#endif

#if defined(__SSE2__)
#define COMMPRESS_SIMD_SSE2 1
#endif

#if defined(COMMPRESS_SIMD_AVX512) || (defined(COMMPRESS_SIMD_AVX2) && defined(__F16C__))
#define COMMPRESS_SIMD_F16C 1
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define COMMPRESS_CRC32C_X86 1
#endif
#if defined(COMMPRESS_CRC32C_X86) && defined(COMMPRESS_SIMD_AVX512) && defined(__VPCLMULQDQ__) &&  \
    defined(__PCLMUL__) && defined(__SSE4_2__)
#define COMMPRESS_CRC32C_STREAMING 1
#endif
#if defined(__ARM_FEATURE_CRC32)
#define COMMPRESS_CRC32C_ARM 1
#endif

// GCC 12's AVX-512 intrinsics start from self-initialized "undefined" vectors, which
// -Wmaybe-uninitialized (or -Wuninitialized) reports where they are inlined (GCC bug 105593).
// Code that uses intrinsics sits between these two.
#if defined(__GNUC__) && !defined(__clang__)
#define COMMPRESS_INTRINSICS_BEGIN                                                                 \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")       \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define COMMPRESS_INTRINSICS_END _Pragma("GCC diagnostic pop")
#else
#define COMMPRESS_INTRINSICS_BEGIN
#define COMMPRESS_INTRINSICS_END
#endif
