# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""1-bit Adam (Tang et al. 2021; docs/optim.md) as a ``torch.optim.Optimizer``.

The C++ ``onebit_adam`` does the exchange and the update: the optimizer replaces both DDP's
all-reduce and Adam, so the model is not wrapped in DistributedDataParallel. Every rank calls
``step()`` after its own backward pass; during the warm-up the gradients are averaged
losslessly and Adam updates m, v and the parameters, then v is frozen and the momentum crosses
the wire through the pipeline (by default the RMS-scaled sign with error feedback).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch
import torch.distributed as dist

from .. import _commpress as _cp
from .. import errc, error
from .comm import TorchCommunicator


class OnebitAdam(torch.optim.Optimizer):
    """1-bit Adam over a torch.distributed group for float32 CPU parameters.

    The parameters keep their values and shapes but their storage moves into one flat buffer
    the optimizer owns, which the C++ step updates in place (no copy of the parameters per step).

    Args:
        params: the parameters (every rank passes the same ones, in the same order).
        config: a ``commpress.onebit_adam_config`` (lr, betas, eps, freeze_step,
            variance_floor, ...).
        pipe: the momentum's pipeline (feedback none or ef; default ef + sign with RMS scale).
        group: the process group (default: the world).
        seed: the random stream of the encodes (stochastic codecs).
        exchange: ``"gather"`` (all-gather of the compressed momenta: one error point, N - 1
            payloads per rank and step) or ``"sharded"`` (DeepSpeed's compressed_allreduce: a
            worker error per chunk and a server error, about two payloads per rank whatever N).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        config: Any,
        pipe: Any = None,
        *,
        group: Optional[dist.ProcessGroup] = None,
        seed: int = 0,
        exchange: str = "gather",
    ) -> None:
        super().__init__(params, {})
        self._params = [p for g in self.param_groups for p in g["params"]]
        for p in self._params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise error(errc.invalid_argument, "onebit_adam: parameters must be float32 on the CPU")
        n = sum(p.numel() for p in self._params)
        self.pipe = pipe if pipe is not None else _cp.pipeline(_cp.ef(), _cp.sign(scale=_cp.sign_scale.rms))
        self.config = config
        self.seed = int(seed)
        self._comm = TorchCommunicator(group)
        self.exchange = exchange
        self._opt = _cp.onebit_adam(self._comm, self.pipe, config, n, exchange)
        self._moments = self._opt.make_state()
        self._error = self._opt.make_feedback_state()
        # The parameters become views of one flat buffer, which the C++ step updates in place;
        # the gradients are gathered into another each step (autograd owns their storage).
        self._flat_params = np.empty(n, np.float32)
        self._flat_grads = np.empty(n, np.float32)
        off = 0
        for p in self._params:
            k = p.numel()
            self._flat_params[off : off + k] = p.detach().reshape(-1).numpy()
            p.data = torch.from_numpy(self._flat_params[off : off + k]).view_as(p)
            off += k
        self.steps = 0  #: steps taken
        self.bytes_sent = 0  #: bytes this rank sent in the exchanges

    def state_dict(self) -> dict:  # type: ignore[override]
        """This rank's moments and errors (C++ save() blobs) and the step count."""
        return {"steps": self.steps, "bytes_sent": self.bytes_sent, "exchange": self.exchange,
                "moments": self._moments.save(), "error": self._error.save()}

    def load_state_dict(self, state: dict) -> None:  # type: ignore[override]
        """Restores state_dict(); a blob of another size or kind raises commpress.Error and
        leaves the optimizer as it was."""
        if state.get("exchange", "gather") != self.exchange:
            raise error(errc.invalid_argument,
                        f"onebit_adam: the checkpoint is of the {state.get('exchange')} exchange, not {self.exchange}")
        moments, err = self._opt.make_state(), self._opt.make_feedback_state()
        moments.load(state["moments"])
        err.load(state["error"])
        self._moments, self._error = moments, err
        self.steps, self.bytes_sent = int(state["steps"]), int(state["bytes_sent"])

    @property
    def compressing(self) -> bool:
        """True once the warm-up is over (v frozen, the momentum compressed)."""
        return bool(self._opt.compressing(self._moments))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:  # type: ignore[override]
        loss = closure() if closure is not None else None
        off = 0
        for p in self._params:
            k = p.numel()
            if p.grad is None:
                self._flat_grads[off : off + k] = 0.0
            else:
                self._flat_grads[off : off + k] = p.grad.reshape(-1).numpy()
            off += k
        ctx = _cp.context(seed=self.seed, step=self.steps, tensor_id=0)
        r = self._opt.step(ctx, self._moments, self._error, self._flat_params, self._flat_grads)
        self.steps += 1
        self.bytes_sent += int(r.wire_bytes)
        return loss
