// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
/// @file
/// The identity and cast codecs (the lightest two share a translation unit): their codec entry
/// points, and their pipelines and channel ends with every feedback.
#include "codec_impl.hpp"

COMMPRESS_PY_INSTANTIATE(commpress::identity)
COMMPRESS_PY_INSTANTIATE(commpress::cast)
