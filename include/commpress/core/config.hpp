// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Portability macros shared by the CPU and CUDA backends.

#if defined(__CUDACC__)
/// Marks code that runs on the host and, under nvcc, on the device too.
#define COMMPRESS_HOST_DEVICE __host__ __device__
#else
#define COMMPRESS_HOST_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define COMMPRESS_DEVICE_COMPILATION 1
#else
#define COMMPRESS_DEVICE_COMPILATION 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define COMMPRESS_FORCEINLINE inline __attribute__((always_inline))
#define COMMPRESS_NOINLINE inline __attribute__((noinline))
#define COMMPRESS_RESTRICT __restrict__
#else
#define COMMPRESS_FORCEINLINE inline
#define COMMPRESS_NOINLINE inline
#define COMMPRESS_RESTRICT
#endif

#define COMMPRESS_VERSION_MAJOR 0
#define COMMPRESS_VERSION_MINOR 1
#define COMMPRESS_VERSION_PATCH 0
