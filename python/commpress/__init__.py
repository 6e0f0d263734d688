# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""commpress: compression of what crosses the wire in distributed training.

The names mirror the C++ library (``commpress::quantize`` is ``commpress.quantize``, the free
functions take the same arguments minus the execution policy, which is a keyword). Arrays are
any DLPack or buffer-protocol object (torch, NumPy, JAX, CuPy): float32 / float16 / bfloat16
tensors, uint8 payloads and workspaces. Every refused call raises :class:`commpress.Error`,
whose ``code`` is a :class:`commpress.errc`, and leaves outputs and states unchanged.

``commpress.torch`` holds the PyTorch adapters (a DDP communication hook, a pipeline stage
boundary, the sharded reduce-scatter); see docs/python.md.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from . import _commpress
from ._commpress import *  # noqa: F401,F403  (the C++ names)
from ._commpress import Error, context, errc, pipeline
from . import cpu, cuda  # noqa: F401  (the execution policies: cpu.seq, cpu.par, cuda.par)

__version__ = "0.1.0"

Codec = Union[
    _commpress.identity,
    _commpress.cast,
    _commpress.quantize,
    _commpress.top_k,
    _commpress.random_k,
    _commpress.sign,
    _commpress.fp8,
    _commpress.mxfp8,
    _commpress.mxfp8_e5m2,
    _commpress.mxfp4,
    _commpress.nvfp4,
    _commpress.terngrad,
    _commpress.natural,
    _commpress.qsgd8,
    _commpress.qsgd4,
    _commpress.qsgd2,
    _commpress.rotated_quantize,
    _commpress.rotated_sign,
    _commpress.rotated_mxfp4,
]

_ROTATED = {
    _commpress.quantize: _commpress.rotated_quantize,
    _commpress.sign: _commpress.rotated_sign,
    _commpress.mxfp4: _commpress.rotated_mxfp4,
}


def rotated(inner: Codec, log2_window: int = 8) -> Codec:
    """`inner` after the randomized Hadamard rotation in windows of 2**log2_window elements
    (C++ ``rotated<C>``; 3 <= log2_window <= 12): on heavy-tailed tensors a low-bit quantizer
    loses less (docs/methods.md section 16). The binding has it for quantize, sign and mxfp4."""
    cls = _ROTATED.get(type(inner))
    if cls is None:
        names = ", ".join(c.__name__ for c in _ROTATED)
        raise error(errc.invalid_argument, f"python: rotated() takes {names}, not {type(inner).__name__}")
    return cls(inner, log2_window)


def error(code: errc, message: str) -> Error:
    """A :class:`commpress.Error` raised by Python code (the adapters), with its ``code``."""
    e = Error(f"commpress: {message} ({code.name.replace('_', ' ')})")
    e.code = code
    return e


def _empty_like(like: Any, shape: tuple, dtype: str) -> Any:
    """A new array of the framework and device of `like` (torch when `like` is a tensor)."""
    if type(like).__module__.startswith("torch"):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if dtype == "bfloat16":
        raise error(errc.invalid_argument, "python: NumPy has no bfloat16; decode into a torch tensor")
    return np.empty(shape, dtype=np.dtype(dtype))


def compress(
    codec_or_pipe: Union[Codec, pipeline],
    x: Any,
    ctx: Optional[context] = None,
    *,
    state: Any = None,
    ids: Any = None,
) -> Any:
    """Allocating convenience: the payload of `x` as a new uint8 array (NumPy, or torch for a
    tensor). A pipeline also takes its sender ``state`` (and ``ids`` for aq_sgd)."""
    ctx = ctx if ctx is not None else context()
    n = int(np.prod(x.shape)) if hasattr(x, "shape") else len(x)
    out = _empty_like(x, (_commpress.max_payload_bytes(codec_or_pipe, n),), "uint8")
    if isinstance(codec_or_pipe, pipeline):
        if state is None:
            raise error(errc.invalid_argument, "python: compress(pipeline, ...) needs state=")
        if ids is None:
            r = _commpress.encode(codec_or_pipe, state, ctx, x, out)
        else:
            r = _commpress.encode(codec_or_pipe, state, ctx, x, out, ids=ids)
    else:
        r = _commpress.encode(codec_or_pipe, ctx, x, out)
    return out[: r.bytes] if r is not None else out


def decompress(
    codec_or_pipe: Union[Codec, pipeline],
    payload: Any,
    n: Optional[int] = None,
    *,
    dtype: str = "float32",
    state: Any = None,
    ids: Any = None,
) -> Any:
    """Allocating convenience: decodes `payload` into a new array of `n` elements (default: the
    count its header declares) of `dtype` (float32, float16; bfloat16 for torch payloads)."""
    if n is None:
        # The header's element count: bytes 8..15, little-endian (docs/wire-format.md).
        n = int.from_bytes(np.asarray(payload[:16]).tobytes()[8:16], "little")
    out = _empty_like(payload, (n,), dtype)
    if isinstance(codec_or_pipe, pipeline):
        if state is None:
            raise error(errc.invalid_argument, "python: decompress(pipeline, ...) needs state=")
        if ids is None:
            _commpress.decode(codec_or_pipe, state, payload, out)
        else:
            _commpress.decode(codec_or_pipe, state, payload, out, ids=ids)
    else:
        _commpress.decode(codec_or_pipe, payload, out)
    return out
