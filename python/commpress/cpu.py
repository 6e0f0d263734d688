# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Host execution policies, as C++ ``commpress::cpu``: ``seq`` (the reference), ``par`` and
``par_t(threads, grain)`` (OpenMP threads, the same bytes as ``seq``). Pass one as
``policy=`` to the codec entry points; pipelines, channels and optimizers run on ``seq``."""

from ._commpress import _policy_par, _policy_seq, policy

seq: policy = _policy_seq()
par: policy = _policy_par()


def par_t(threads: int = 0, grain: int = 0) -> policy:
    """``cpu::par_t{threads, grain}``: 0 threads takes OpenMP's default, 0 grain 1 Mi."""
    return _policy_par(threads, grain)
