# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Runs a function on N real torch.distributed (gloo) processes, with a hard timeout."""

from __future__ import annotations

import multiprocessing as mp
import queue
import socket
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, List, Sequence


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn: Callable, rank: int, world: int, port: int, args: Sequence[Any], q: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # the same matmul blocking as the single-process replays
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=60),
        )
        q.put((rank, True, fn(rank, world, *args)))
    except BaseException as e:  # noqa: BLE001  (reported to the test process)
        q.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001
                pass


def run_ranks(fn: Callable, world: int, *args: Any, timeout: float = 240.0, expect_failure: bool = False) -> List[Any]:
    """fn(rank, world, *args) on `world` spawned processes; returns the results in rank order.

    Raises AssertionError when a rank fails (unless expect_failure: then each rank's error text
    is returned) or when the ranks have not all finished within `timeout` seconds."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_child, args=(fn, r, world, port, args, q), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    results: dict = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"ranks {sorted(set(range(world)) - set(results))} did not finish in {timeout} s")
            try:
                rank, ok, value = q.get(timeout=min(left, 5.0))
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs) and q.empty():
                    time.sleep(1.0)
                    if q.empty():
                        codes = [p.exitcode for p in procs]
                        raise AssertionError(f"a rank died without reporting (exit codes {codes})")
                continue
            results[rank] = (ok, value)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if expect_failure:
        return [results[r][1] for r in range(world)]
    failed = {r: v for r, (ok, v) in results.items() if not ok}
    assert not failed, "\n".join(f"rank {r}: {v}" for r, v in failed.items())
    return [results[r][1] for r in range(world)]
