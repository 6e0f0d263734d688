# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""scripts/slow_link.py --quick: the Fashion-MNIST DDP example with one rank per network
namespace over a tc-shaped bridge. The time per step on the shaped link must respect the link's
rate (it cannot, had the shaping not happened), and nothing the script created may remain, after
a normal run or an interrupted one. Skipped (the script's exit code 77) without root."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slow_link.py"
SKIP = 77
BURST = 65536  # the tbf bucket of the script: bytes a shaped interface may send at once


def _slow_link(*args: str, out: Path) -> subprocess.Popen:
    cmd = [sys.executable, str(SCRIPT), *args, "--out", str(out), "--python", sys.executable]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _leftovers(pid: int = 0) -> list:
    """This prefix's namespaces and root links (of one run when pid is given)."""
    prefix = f"cpsl-{pid}-" if pid else "cpsl-"
    names = [ln.split()[0] for ln in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                       text=True).stdout.splitlines() if ln.split()]
    links = re.findall(r"^\d+: ([^:@]+)", subprocess.run(["ip", "-o", "link", "show"], capture_output=True,
                                                         text=True).stdout, re.M)
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    return ([n for n in names if n.startswith(prefix)] + [n for n in links if n.startswith(prefix)]
            + [ln for ln in qdiscs.splitlines() if prefix in ln])


def _skip_if_77(p: subprocess.Popen, out: str) -> None:
    if p.returncode == SKIP:
        pytest.skip(out.strip().splitlines()[-1] if out.strip() else "slow_link skipped")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("iproute2 (ip, tc) is not installed")
    out = tmp_path_factory.mktemp("slow_link")
    p = _slow_link("--quick", out=out)
    text, _ = p.communicate(timeout=240)
    _skip_if_77(p, text)
    assert p.returncode == 0, text
    with open(out / "slow_link.csv") as f:
        rows = list(csv.DictReader(f))
    return text, rows, json.loads((out / "slow_link.json").read_text()), p.pid


def test_quick_run_has_every_row(quick):
    text, rows, report, _ = quick
    got = {(r["link"], r["codec"]) for r in rows}
    assert got == {(link, codec) for link in ("unshaped", "100mbit:0ms") for codec in ("none", "q4")}, text
    assert len(report["runs"]) == 4 and len(report["rows"]) == 4
    for r in rows:
        assert int(r["steps"]) == 24 and float(r["step_ms"]) > 0 and 0.1 < float(r["final_accuracy"]) <= 1
    compressed = [r for r in rows if r["codec"] == "q4"]
    plain = [r for r in rows if r["codec"] == "none"]
    assert all(int(c["bytes_per_step"]) * 5 < int(u["bytes_per_step"]) for c, u in zip(compressed, plain))
    assert "| link | codec | ms/step |" in text


def test_shaped_link_is_no_faster_than_its_rate(quick):
    """Bytes per step over the rate, less the token bucket's burst, is a floor the unshaped
    bridge (far above 100 Mbit/s) would not respect."""
    text, rows, report, _ = quick
    for r in rows:
        if r["link"] == "unshaped":
            continue
        rate = float(r["rate_gbit"]) * 1e9
        floor_ms = 1e3 * 8 * (int(r["bytes_per_step"]) - BURST) / rate
        assert float(r["step_ms"]) >= floor_ms, (r, text)
        # Every byte the rank's interface sent, over the run, went through the shaper.
        run = next(x for x in report["runs"] if x["link"] == r["link"] and x["codec"] == r["codec"])
        assert "tbf" in run["qdisc"] or "netem" in run["qdisc"], run["qdisc"]
        assert max(run["wire_bytes"]) >= int(r["bytes_per_step"]) * int(r["steps"])
    plain = {r["link"]: float(r["step_ms"]) for r in rows if r["codec"] == "none"}
    assert plain["100mbit:0ms"] > plain["unshaped"], text


def test_nothing_remains_after_a_run(quick):
    *_, pid = quick
    assert _leftovers(pid) == []


def test_an_interrupted_run_cleans_up(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    p = _slow_link("--quick", out=tmp_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        if list(tmp_path.glob("*.rank1.log")):  # the ranks are starting in their namespaces
            break
        time.sleep(0.2)
    if p.poll() is not None:
        text = p.stdout.read()
        _skip_if_77(p, text)
        pytest.fail(f"slow_link ended before the interrupt: {text}")
    assert _leftovers(p.pid), "no namespace while the ranks run"
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    text, _ = p.communicate(timeout=60)
    assert p.returncode == 130, text
    assert _leftovers(p.pid) == [], text


def test_without_root_it_skips(tmp_path):
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to drop to another user")
    r = subprocess.run([setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable,
                        str(SCRIPT), "--quick", "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == SKIP, r.stdout + r.stderr
    assert "need root" in r.stderr
