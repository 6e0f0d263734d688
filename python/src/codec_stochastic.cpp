// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
/// @file
/// The stochastic block-scaled codecs of the kit (TernGrad, natural compression): their codec
/// entry points, and their pipelines and channel ends with every feedback.
#include "codec_impl.hpp"

COMMPRESS_PY_INSTANTIATE(commpress::terngrad)
COMMPRESS_PY_INSTANTIATE(commpress::natural)
