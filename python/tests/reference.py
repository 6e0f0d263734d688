# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The Python side of tests/reference/reference.cpp: its records file and the configurations it
runs, written again with the binding's classes (keep the three tables in step with the C++)."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path
from typing import Dict

import numpy as np

import commpress as cp


def load_records(path: Path) -> Dict[str, bytes]:
    """[u32 name length][name][u64 data length][data]... as a dict."""
    data = path.read_bytes()
    out: Dict[str, bytes] = {}
    pos = 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        name = data[pos + 4 : pos + 4 + n].decode()
        (m,) = struct.unpack_from("<Q", data, pos + 4 + n)
        start = pos + 12 + n
        out[name] = data[start : start + m]
        pos = start + m
    return out


def run_reference(tmp: Path) -> Dict[str, bytes]:
    """Runs the C++ reference program named by COMMPRESS_PY_REFERENCE into `tmp`."""
    exe = os.environ.get("COMMPRESS_PY_REFERENCE")
    if not exe:
        raise FileNotFoundError("COMMPRESS_PY_REFERENCE is not set")
    out = tmp / "reference.bin"
    subprocess.run([exe, str(out)], check=True, timeout=120)
    return load_records(out)


def floats(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float32)


# fuzz/codec_table.hpp, configuration by configuration: each codec's examples() in the order
# of compress/codec_list.hpp.
CODECS = [
    cp.identity(),
    cp.cast(to=cp.dtype.bf16),
    cp.cast(to=cp.dtype.f16),
    cp.quantize(bits=4, granularity=cp.scale_granularity.block, group=8),
    cp.quantize(
        bits=8,
        granularity=cp.scale_granularity.tensor,
        group=0,
        range=cp.quant_range.asymmetric,
        round=cp.rounding.stochastic,
    ),
    cp.quantize(bits=3, granularity=cp.scale_granularity.column, group=4, range=cp.quant_range.asymmetric),
    cp.quantize(bits=1, granularity=cp.scale_granularity.block, group=16, range=cp.quant_range.asymmetric),
    cp.quantize(bits=2, granularity=cp.scale_granularity.block, group=3, round=cp.rounding.stochastic),
    cp.quantize(bits=5, granularity=cp.scale_granularity.column, group=2),
    cp.top_k(fraction=0.25),
    cp.top_k(count=3, row_length=8, values=cp.dtype.f16),
    cp.top_k(fraction=0.9, values=cp.dtype.bf16),
    cp.top_k(fraction=0.0),
    cp.top_k(count=2, row_length=1000),
    cp.top_k(
        count=2,
        row_length=40,
        value_quantizer=cp.quantize(bits=2, group=8, range=cp.quant_range.asymmetric),
    ),
    cp.top_k(
        fraction=0.5,
        value_quantizer=cp.quantize(
            bits=3, granularity=cp.scale_granularity.tensor, group=0, round=cp.rounding.stochastic
        ),
    ),
    cp.random_k(count=4),
    cp.random_k(fraction=0.5, unbiased=True, values=cp.dtype.bf16),
    cp.random_k(fraction=1.0, values=cp.dtype.f16),
    cp.random_k(fraction=0.25, value_quantizer=cp.quantize(bits=2, group=8, range=cp.quant_range.asymmetric)),
    cp.random_k(
        fraction=0.5,
        unbiased=True,
        value_quantizer=cp.quantize(
            bits=3, granularity=cp.scale_granularity.tensor, group=0, round=cp.rounding.stochastic
        ),
    ),
    cp.sign(),
    cp.sign(granularity=cp.sign_granularity.block, block=5, scale=cp.sign_scale.rms),
    cp.fp8(),
    cp.fp8(format=cp.minifloat.e5m2, granularity=cp.scale_granularity.tensor, group=0),
    cp.fp8(format=cp.minifloat.e4m3, group=5),
    cp.mxfp8(),
    cp.mxfp8_e5m2(),
    cp.mxfp4(),
    cp.nvfp4(),
    cp.terngrad(clip_sigmas=2.5),
    cp.terngrad(block=128),
    cp.terngrad(block=5, clip_sigmas=2.5),
    cp.natural(),
    cp.natural(block=32),
    cp.natural(block=5),
    cp.qsgd8(),
    cp.qsgd8(block=128),
    cp.qsgd8(block=5, levels=3),
    cp.qsgd4(),
    cp.qsgd4(block=128),
    cp.qsgd4(block=5, levels=3),
    cp.qsgd2(),
    cp.qsgd2(block=128),
    cp.qsgd2(block=5, levels=1),
]
# Then compress/codec_list.hpp's rotated_codecs: each inner codec's examples, each rotated in
# windows of 2^3 and 2^8 (rotated<C>::examples()).
CODECS += [cp.rotated(c, w) for kind in (cp.quantize, cp.sign, cp.mxfp4) for c in list(CODECS) if type(c) is kind for w in (3, 8)]
# Then fuzz/codec_table.hpp's extra_configs: qsgd's Elias body.
CODECS += [
    cp.qsgd2(block=0, levels=1, coding=cp.qsgd_coding.elias),
    cp.qsgd8(block=128, levels=7, coding=cp.qsgd_coding.elias),
]
CODEC_CTX = cp.context(seed=42, step=3, tensor_id=7)

# reference.cpp pipelines().
PIPELINES = {
    "ef_quantize": cp.pipeline(cp.ef(), cp.quantize(bits=4, group=64)),
    "ef21_top_k": cp.pipeline(cp.ef21(), cp.top_k(fraction=0.1)),
    "loco_int8_quantize": cp.pipeline(
        cp.loco(beta=0.8, reset_every=3, storage=cp.store_int8), cp.quantize(bits=4, group=128)
    ),
    "loco_int4_sign": cp.pipeline(cp.loco(beta=0.5, reset_every=0, storage=cp.store_int4), cp.sign()),
    "loco_bf16_random_k": cp.pipeline(cp.loco(storage=cp.store_bf16), cp.random_k(fraction=0.25)),
    "loco_f32_cast": cp.pipeline(cp.loco(beta=0.3), cp.cast(to=cp.dtype.f16)),
    "none_quantize": cp.pipeline(
        cp.none(),
        cp.quantize(
            bits=8,
            granularity=cp.scale_granularity.tensor,
            group=0,
            range=cp.quant_range.asymmetric,
            round=cp.rounding.stochastic,
        ),
    ),
}
AQ_SAMPLES, AQ_ROW, AQ_ROWS = 6, 50, 4
AQ_PIPELINES = {
    "aq_int4_quantize": cp.pipeline(
        cp.aq_sgd(AQ_SAMPLES, AQ_ROW, warmup_steps=1, storage=cp.store_int4), cp.quantize(bits=4, group=25)
    ),
    "aq_f32_top_k": cp.pipeline(cp.aq_sgd(AQ_SAMPLES, AQ_ROW, warmup_steps=0), cp.top_k(fraction=0.2)),
}
PIPELINE_N, PIPELINE_STEPS, PIPELINE_TENSOR = 1000, 4, 11

# reference.cpp channels(): (activation pipeline, gradient pipeline, keyed by sample).
CHANNEL_ROWS, CHANNEL_COLS, CHANNEL_STEPS = 4, 30, 3
CHANNELS = {
    "ef21_top_k__ef_q8": (
        cp.pipeline(cp.ef21(), cp.top_k(fraction=0.1)),
        cp.pipeline(cp.ef(), cp.quantize(bits=8, group=64)),
        False,
    ),
    "aq_int4__cast": (
        cp.pipeline(
            cp.aq_sgd(8, CHANNEL_COLS, warmup_steps=1, storage=cp.store_int4), cp.quantize(bits=4, group=30)
        ),
        cp.pipeline(cp.none(), cp.cast(to=cp.dtype.bf16)),
        True,
    ),
}

# reference.cpp sharded(): (worker pipeline, server pipeline), n, steps.
SHARDED = {
    "ef_q4__ef_sign": (
        cp.pipeline(cp.ef(), cp.quantize(bits=4, group=16)),
        cp.pipeline(cp.ef(), cp.sign(granularity=cp.sign_granularity.block, block=16, scale=cp.sign_scale.rms)),
    ),
    # variable-length payloads at both points
    "ef_qsgd4e": (
        cp.pipeline(cp.ef(), cp.qsgd4(block=64, coding=cp.qsgd_coding.elias)),
        cp.pipeline(cp.ef(), cp.qsgd4(block=64, coding=cp.qsgd_coding.elias)),
    ),
}
SHARDED_N, SHARDED_STEPS = 1003, 3
