// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Umbrella header: everything that builds with a plain C++20 compiler (no CUDA, no MPI).

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/rotated.hpp"
#include "commpress/backend/cpu/scaled.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/collective/collective.hpp"
#include "commpress/compress/codec_list.hpp"
#include "commpress/compress/rotated.hpp"
#include "commpress/core/canonical_sum.hpp"
#include "commpress/core/concepts.hpp"
#include "commpress/core/config.hpp"
#include "commpress/core/context.hpp"
#include "commpress/core/dtype.hpp"
#include "commpress/core/error.hpp"
#include "commpress/core/hadamard.hpp"
#include "commpress/core/math.hpp"
#include "commpress/core/minifloat.hpp"
#include "commpress/core/rng.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/format/bit_packing.hpp"
#include "commpress/format/crc32c.hpp"
#include "commpress/format/header.hpp"
#include "commpress/optim/adam.hpp"
#include "commpress/optim/sgd.hpp"
#include "commpress/pipeline/channel.hpp"
#include "commpress/pipeline/pipeline.hpp"
