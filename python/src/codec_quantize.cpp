// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
/// @file
/// The quantize codec: its codec entry points, and its pipelines and channel ends with every
/// feedback.
#include "codec_impl.hpp"

COMMPRESS_PY_INSTANTIATE(commpress::quantize)
