# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The binding writes the C++ library's bytes: every configuration of the fuzz table, every
input dtype, against the reference program built from the same headers without the binding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import commpress as cp
from reference import CODEC_CTX, CODECS, floats

DTYPES = {"f32": (np.float32, torch.float32), "f16": (np.float16, torch.float16), "bf16": (None, torch.bfloat16)}


def _input(ref, d):
    """The reference input of dtype d, as torch (bf16 has no NumPy dtype) from the C++ bits."""
    raw = ref[f"input/{d}"]
    if d == "f32":
        return torch.frombuffer(bytearray(raw), dtype=torch.float32)
    return torch.frombuffer(bytearray(raw), dtype=torch.int16).view(DTYPES[d][1])


@pytest.mark.parametrize("d", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("i", range(len(CODECS)))
def test_same_bytes_as_cpp(ref, i, d):
    codec = CODECS[i]
    x = _input(ref, d)
    out = np.full(cp.max_payload_bytes(codec, x.numel()), 0xAB, np.uint8)
    r = cp.encode(codec, CODEC_CTX, x, out)
    want = ref[f"codec/{i}/{d}/payload"]
    # Every body has a fixed length except qsgd's Elias body, which is at most that and leaves
    # the rest of the buffer as it was.
    assert r.bytes == len(want) <= out.size
    assert out[: r.bytes].tobytes() == want
    assert (out[r.bytes :] == 0xAB).all()
    dec = np.zeros(x.numel(), np.float32)
    h = cp.decode(codec, out, dec)
    assert h.count == x.numel() and h.tensor_id == 7 and h.step == 3
    assert dec.tobytes() == ref[f"codec/{i}/{d}/decoded"]
    dec_as = torch.zeros(x.numel(), dtype=DTYPES[d][1])
    cp.decode(codec, out, dec_as)
    assert dec_as.view(torch.uint8).numpy().tobytes() == ref[f"codec/{i}/{d}/decoded_as"]
    acc = (0.5 * (np.arange(x.numel()) % 3)).astype(np.float32)
    cp.decode_accumulate(codec, out, acc, 0.25)
    assert acc.tobytes() == ref[f"codec/{i}/{d}/accumulated"]


@pytest.mark.parametrize("i", range(len(CODECS)))
def test_roundtrip_and_par_match_cpp(ref, i):
    codec = CODECS[i]
    x = floats(ref["input/f32"]).copy()
    cp.roundtrip(codec, CODEC_CTX, x)
    assert x.tobytes() == ref[f"codec/{i}/roundtrip"]
    # cpu::par writes seq's bytes for any team size.
    y = floats(ref["input/f32"])
    out = np.zeros(cp.max_payload_bytes(codec, y.size), np.uint8)
    r = cp.encode(codec, CODEC_CTX, y, out, policy=cp.cpu.par_t(threads=2, grain=64))
    assert out[: r.bytes].tobytes() == ref[f"codec/{i}/f32/payload"]


def test_frameworks_and_allocating_forms():
    codec = cp.quantize(bits=4, group=32)
    x = np.linspace(-3, 3, 256, dtype=np.float32)
    p_np = cp.compress(codec, x, cp.context(seed=1))
    p_t = cp.compress(codec, torch.from_numpy(x), cp.context(seed=1))
    assert isinstance(p_t, torch.Tensor) and p_np.tobytes() == p_t.numpy().tobytes()
    # A Python bytes payload decodes too (read-only buffer).
    y = cp.decompress(codec, bytes(p_np))
    assert y.shape == (256,) and np.abs(y - x).max() <= 3 / 7 / 2 + 1e-6
    assert cp.max_payload_bytes(codec, 256) == p_np.size == 64 + 8 * 4 + 128
    assert cp.workspace_bytes(codec, 256) >= 0
    assert repr(codec).startswith("quantize(bits=4")
    assert codec == cp.quantize(bits=4, group=32) and codec != cp.quantize(bits=4, group=64)
    assert cp.sum_compatible(cp.identity()) and cp.sum_compatible(cp.random_k())
    assert not cp.sum_compatible(codec) and not cp.sum_compatible(cp.top_k())


def test_random_k_value_quantizer():
    plain = cp.random_k(fraction=1 / 32)
    assert plain.value_quantizer is None
    q2 = cp.quantize(bits=2, group=64, range=cp.quant_range.asymmetric)
    codec = cp.random_k(fraction=1 / 32, value_quantizer=q2)
    assert codec.value_quantizer == q2 and codec != plain and "value_quantizer" in repr(codec)
    # 200 of 6400 kept: 4 records of 8 bytes and 50 bytes of 2-bit codes instead of 800 bytes.
    assert cp.max_payload_bytes(codec, 6400) == 64 + 82
    assert cp.max_payload_bytes(plain, 6400) == 64 + 800
    x = np.random.default_rng(3).standard_normal(6400).astype(np.float32)
    ctx = cp.context(seed=5, step=2, tensor_id=1)
    y = cp.decompress(codec, cp.compress(codec, x, ctx))
    y_plain = cp.decompress(plain, cp.compress(plain, x, ctx))
    kept = y_plain != 0
    assert kept.sum() == 200 and ((y != 0) <= kept).all()  # the same selection
    # Kept values within half a step of the asymmetric 2-bit levels of their group.
    assert np.abs(y[kept] - y_plain[kept]).max() <= (x.max() - x.min()) / 3 / 2 + 1e-5
    # The values summed by the all-reduce path are the decoded ones.
    vals = cp.random_k_values(codec, cp.compress(codec, x, ctx))
    assert np.array_equal(vals, y[kept])
    codec.value_quantizer = None
    assert codec == plain
    with pytest.raises(cp.Error, match="must stay f32"):
        cp.compress(cp.random_k(fraction=0.1, values=cp.dtype.f16, value_quantizer=q2), x, ctx)


def test_optimizers_match_torch():
    g = torch.linspace(-1, 1, 50)
    p0 = torch.linspace(0.5, -0.5, 50)
    for opt, ref_opt in (
        (cp.sgd(lr=0.1, momentum=0.9), lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9)),
        (cp.adamw(lr=0.01), lambda p: torch.optim.AdamW([p], lr=0.01)),
    ):
        st = opt.make_state(50)
        params = p0.clone().numpy()
        tp = p0.clone().requires_grad_(True)
        o = ref_opt(tp)
        for _ in range(3):
            opt.step(st, params, g.numpy())
            tp.grad = g.clone()
            o.step()
        assert st.step == 3
        np.testing.assert_allclose(params, tp.detach().numpy(), rtol=1e-5, atol=1e-7)
        blob = st.save(3)
        st2 = opt.make_state(50)
        st2.load(blob, 3)
        assert st2 == st
