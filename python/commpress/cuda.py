# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The CUDA execution policy, as C++ ``commpress::cuda``: ``par.on(stream)`` with an integer
``cudaStream_t`` (for torch: ``torch.cuda.current_stream().cuda_stream``). Device calls only
enqueue kernels on that stream; data-dependent errors go to a caller-owned status array of
``status_bytes()`` bytes in device memory. Needs a module built with COMMPRESS_PYTHON_CUDA."""

from ._commpress import _cuda_status_bytes, _has_cuda, _policy_cuda, policy

par: policy = _policy_cuda(0)


def available() -> bool:
    """Whether this module was built with the CUDA backend."""
    return _has_cuda()


def status_bytes() -> int:
    """Bytes of a ``cuda::device_status`` (0 without CUDA)."""
    return _cuda_status_bytes()
