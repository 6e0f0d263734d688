// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
/// @file
/// QSGD with 8-, 4- and 2-bit codes (a stochastic block-scaled codec of the kit): its codec
/// entry points, and its pipelines and channel ends with every feedback.
#include "codec_impl.hpp"

COMMPRESS_PY_INSTANTIATE(commpress::qsgd8)
COMMPRESS_PY_INSTANTIATE(commpress::qsgd4)
COMMPRESS_PY_INSTANTIATE(commpress::qsgd2)
