# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""The README's PyTorch example runs as written (on 2 processes, as torchrun would start it),
the type stubs cover the module, and the Fashion-MNIST example runs on a small subset."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import commpress

ROOT = Path(__file__).resolve().parents[2]


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README.md has no python block"
    return blocks[0]


def test_readme_torch_example_runs(tmp_path):
    script = tmp_path / "readme_example.py"
    script.write_text(_readme_example())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for rank, p in enumerate(procs):
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
        sent, full = map(int, re.search(r"sent (\d+) bytes, fp32 all-reduce (\d+)", out).groups())
        assert f"rank {rank}" in out and 0 < sent < full / 3, out


def test_stubs_cover_the_module():
    stub = Path(commpress.__file__).with_name("_commpress.pyi")
    assert stub.is_file(), "the package ships no _commpress.pyi"
    text = stub.read_text()
    public = [n for n in dir(commpress._commpress) if not n.startswith("_")]
    missing = [n for n in public if not re.search(rf"\b(class|def) {re.escape(n)}\b|^{re.escape(n)}\b", text, re.M)]
    assert not missing, f"names without stubs: {missing}"
    assert Path(commpress.__file__).with_name("py.typed").is_file()


@pytest.mark.skipif(
    not Path(os.environ.get("COMMPRESS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")).is_dir(),
    reason="dataset-fashion-mnist is not installed",
)
def test_fashion_mnist_example_runs():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples/torch/fashion_mnist_ddp.py"), "--ranks", "2", "--epochs", "1",
         "--train-limit", "4000", "--codec", "q4,terngrad"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    acc = [float(a) for a in re.findall(r"accuracy (\d+\.\d+)%", out.stdout)]
    assert len(acc) == 3 and min(acc) > 60.0, out.stdout
    assert "fewer bytes" in out.stdout
