// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
/// @file
/// The block-scaled codecs of the kit (fp8, the MX formats, NVFP4): their codec entry points,
/// and their pipelines and channel ends with every feedback.
#include "codec_impl.hpp"

COMMPRESS_PY_INSTANTIATE(commpress::fp8)
COMMPRESS_PY_INSTANTIATE(commpress::mxfp8)
COMMPRESS_PY_INSTANTIATE(commpress::mxfp8_e5m2)
COMMPRESS_PY_INSTANTIATE(commpress::mxfp4)
COMMPRESS_PY_INSTANTIATE(commpress::nvfp4)
