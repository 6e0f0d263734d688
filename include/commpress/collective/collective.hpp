// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Umbrella header of the compressed collectives and stage channels (docs/collectives.md),
/// with the CPU backend of every codec. Pair it with a communicator adapter:
/// comm/loopback.hpp (in-process), comm/mpi.hpp (link commpress::mpi).

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/collective/all_gather.hpp"
#include "commpress/collective/all_reduce.hpp"
#include "commpress/collective/layout.hpp"
#include "commpress/collective/reduce_scatter.hpp"
#include "commpress/collective/stage_channel.hpp"
