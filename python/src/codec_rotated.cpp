// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
/// @file
/// The rotated codecs (the randomized Hadamard rotation before quantize, sign and MXFP4): their
/// codec entry points, and their pipelines and channel ends with every feedback.
#include "codec_impl.hpp"

COMMPRESS_PY_INSTANTIATE(commpress::rotated<commpress::quantize>)
COMMPRESS_PY_INSTANTIATE(commpress::rotated<commpress::sign>)
COMMPRESS_PY_INSTANTIATE(commpress::rotated<commpress::mxfp4>)
