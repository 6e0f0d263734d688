# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Bad input raises commpress.Error with the C++ errc and leaves outputs and states
byte-identical: the binding's own checks run before the library writes anything, and the
library refuses bad payloads before it writes."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

import commpress as cp

CODEC = cp.quantize(bits=4, group=32)
N = 256


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeCudaArray:
    """A DLPack producer that claims CUDA memory (device type 2) for a host buffer: lets the
    device checks run on a machine without a GPU. Nothing ever reads its data."""

    def __init__(self, n: int, code: int = 2, bits: int = 32) -> None:
        self.buf = (ctypes.c_uint8 * (n * bits // 8))()
        self.shape = (ctypes.c_int64 * 1)(n)
        self.m = _DLManagedTensor()
        t = self.m.dl_tensor
        t.data = ctypes.addressof(self.buf)
        t.device = _DLDevice(2, 0)
        t.ndim = 1
        t.dtype = _DLDataType(code, bits, 1)
        t.shape = self.shape

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        pycapsule_new = ctypes.pythonapi.PyCapsule_New
        pycapsule_new.restype = ctypes.py_object
        pycapsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return pycapsule_new(ctypes.addressof(self.m), b"dltensor", None)


def _payload():
    x = np.linspace(-2, 2, N, dtype=np.float32)
    out = np.zeros(cp.max_payload_bytes(CODEC, N), np.uint8)
    cp.encode(CODEC, cp.context(seed=1), x, out)
    return x, out


def _raises(code, fn):
    with pytest.raises(cp.Error) as e:
        fn()
    assert e.value.code == code, str(e.value)
    assert str(e.value).startswith("commpress: ")
    return e.value


def test_error_carries_code_and_message():
    _, payload = _payload()
    e = _raises(cp.errc.truncated, lambda: cp.decode(CODEC, payload[:70], np.zeros(N, np.float32)))
    assert isinstance(e, RuntimeError) and e.code.value == 4 and "truncated" in str(e)


@pytest.mark.parametrize("bad", ["float64", "int32", "uint8"])
def test_wrong_dtype(bad):
    x = np.zeros(N, dtype=bad)
    out = np.full(cp.max_payload_bytes(CODEC, N), 7, np.uint8)
    _raises(cp.errc.invalid_argument, lambda: cp.encode(CODEC, cp.context(), x, out))
    assert (out == 7).all()
    # A payload array of another dtype than uint8/int8 is refused too.
    _, payload = _payload()
    y = np.full(N, 3.0, np.float32)
    _raises(cp.errc.invalid_argument, lambda: cp.decode(CODEC, payload.view(np.float32), y))
    assert (y == 3.0).all()


def test_non_contiguous_views():
    out = np.full(cp.max_payload_bytes(CODEC, N), 7, np.uint8)
    strided = np.zeros(2 * N, np.float32)[::2]
    _raises(cp.errc.invalid_argument, lambda: cp.encode(CODEC, cp.context(), strided, out))
    transposed = torch.zeros(16, 16).t()
    _raises(cp.errc.invalid_argument, lambda: cp.encode(CODEC, cp.context(), transposed, out))
    assert (out == 7).all()
    _, payload = _payload()
    y = np.full((N, 2), 5.0, np.float32)
    _raises(cp.errc.invalid_argument, lambda: cp.decode(CODEC, payload, y[:, 0]))
    assert (y == 5.0).all()


def test_wrong_device():
    x, payload = _payload()
    out = np.full(payload.size, 7, np.uint8)
    # Host input, "device" output: refused before anything runs.
    _raises(cp.errc.invalid_argument, lambda: cp.encode(CODEC, cp.context(), FakeCudaArray(N), out))
    assert (out == 7).all()
    y = np.full(N, 2.0, np.float32)
    _raises(cp.errc.invalid_argument, lambda: cp.decode(CODEC, FakeCudaArray(payload.size, 1, 8), y))
    assert (y == 2.0).all()
    # Pipelines and channels run on host memory.
    pipe = cp.pipeline(cp.ef(), CODEC)
    st = pipe.make_state(N)
    before = st.save()
    _raises(cp.errc.invalid_argument, lambda: cp.encode(pipe, st, cp.context(), FakeCudaArray(N), out))
    assert st.save() == before and (out == 7).all()


def test_output_too_small():
    x, payload = _payload()
    small = np.full(payload.size - 1, 7, np.uint8)
    _raises(cp.errc.buffer_too_small, lambda: cp.encode(CODEC, cp.context(), x, small))
    assert (small == 7).all()
    pipe = cp.pipeline(cp.loco(storage=cp.store_int8), CODEC)
    st = pipe.make_state(N)
    cp.encode(pipe, st, cp.context(), x, np.zeros(payload.size, np.uint8))
    before = st.save()
    _raises(cp.errc.buffer_too_small, lambda: cp.encode(pipe, st, cp.context(step=1), x, small))
    assert st.save() == before and (small == 7).all()


def test_truncated_and_corrupted_payloads():
    x, payload = _payload()
    y = np.full(N, 9.0, np.float32)
    _raises(cp.errc.truncated, lambda: cp.decode(CODEC, payload[:-1], y))
    _raises(cp.errc.truncated, lambda: cp.decode(CODEC, payload[:10], y))
    bad = payload.copy()
    bad[100] ^= 0x10
    _raises(cp.errc.checksum_mismatch, lambda: cp.decode(CODEC, bad, y))
    acc = np.full(N, 9.0, np.float32)
    _raises(cp.errc.checksum_mismatch, lambda: cp.decode_accumulate(CODEC, bad, acc))
    magic = payload.copy()
    magic[0] = 0
    _raises(cp.errc.bad_magic, lambda: cp.decode(CODEC, magic, y))
    assert (y == 9.0).all() and (acc == 9.0).all()


def test_foreign_codec():
    x, payload = _payload()
    y = np.full(N, 9.0, np.float32)
    _raises(cp.errc.codec_mismatch, lambda: cp.decode(cp.top_k(), payload, y))
    _raises(cp.errc.codec_mismatch, lambda: cp.decode(cp.quantize(bits=8, group=32), payload, y))
    _raises(cp.errc.size_mismatch, lambda: cp.decode(CODEC, payload, np.zeros(N + 1, np.float32)))
    assert (y == 9.0).all()


def test_receiver_state_and_channel_unchanged_on_bad_payload():
    pipe = cp.pipeline(cp.ef21(), cp.top_k(fraction=0.25))
    x = np.linspace(-1, 1, N, dtype=np.float32)
    tx, rx = pipe.make_state(N), pipe.make_receiver_state(N)
    out = np.zeros(pipe.max_payload_bytes(N), np.uint8)
    cp.encode(pipe, tx, cp.context(), x, out)
    cp.decode(pipe, rx, out, np.zeros(N, np.float32))
    cp.encode(pipe, tx, cp.context(step=1), x, out)
    before = rx.save()
    y = np.full(N, 4.0, np.float32)
    bad = out.copy()
    bad[-1] ^= 1
    _raises(cp.errc.checksum_mismatch, lambda: cp.decode(pipe, rx, bad, y))
    _raises(cp.errc.codec_mismatch, lambda: cp.decode(cp.pipeline(cp.ef21(), cp.sign()), rx, out, y))
    assert rx.save() == before and (y == 4.0).all()
    # Channel ends: a skipped step is a stream mismatch; state and step stay.
    send, recv = cp.sender_end(pipe, N, cp.context(seed=3)), cp.receiver_end(pipe, N, cp.context(seed=3))
    send.send(x)
    second = send.send(x)
    blob = recv.save()
    _raises(cp.errc.stream_mismatch, lambda: recv.receive(second))
    assert recv.save() == blob and recv.step == 0


def test_state_errors_leave_state_unchanged():
    pipe = cp.pipeline(cp.loco(storage=cp.store_int4), CODEC)
    st = pipe.make_state(N)
    x, _ = _payload()
    out = np.zeros(pipe.max_payload_bytes(N), np.uint8)
    cp.encode(pipe, st, cp.context(), x, out)
    before = st.save(5)
    _raises(cp.errc.stream_mismatch, lambda: st.load(before, 6))  # another tensor id
    corrupt = bytearray(before)
    corrupt[40] ^= 1
    _raises(cp.errc.checksum_mismatch, lambda: st.load(bytes(corrupt), 5))
    _raises(cp.errc.truncated, lambda: st.load(before[:20], 5))
    _raises(cp.errc.size_mismatch, lambda: st.load(pipe.make_state(N + 2).save(5), 5))
    assert st.save(5) == before
    # A state of another feedback type is refused before anything is written.
    out2 = np.full(out.size, 7, np.uint8)
    _raises(cp.errc.invalid_argument, lambda: cp.encode(pipe, cp.ef_state(N), cp.context(), x, out2))
    assert (out2 == 7).all()
    # aq_sgd needs its ids; others refuse them.
    aq = cp.pipeline(cp.aq_sgd(4, 64), CODEC)
    _raises(cp.errc.invalid_argument, lambda: cp.encode(aq, aq.make_state(), cp.context(), x, out2))
    _raises(cp.errc.invalid_argument, lambda: cp.encode(pipe, st, cp.context(), x, out2, ids=np.zeros(4, np.uint64)))
    assert (out2 == 7).all() and st.save(5) == before
