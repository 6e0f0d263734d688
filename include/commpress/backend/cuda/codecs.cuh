// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Every codec of the CUDA backend, its entry points, and the device feedback steps.

#include "commpress/backend/cuda/aq_sgd.cuh"
#include "commpress/backend/cuda/cast.cuh"
#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/error.cuh"
#include "commpress/backend/cuda/feedback.cuh"
#include "commpress/backend/cuda/identity.cuh"
#include "commpress/backend/cuda/policy.cuh"
#include "commpress/backend/cuda/quantize.cuh"
#include "commpress/backend/cuda/random_k.cuh"
#include "commpress/backend/cuda/sign.cuh"
#include "commpress/backend/cuda/status.cuh"
#include "commpress/backend/cuda/top_k.cuh"
