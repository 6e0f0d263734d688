#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training on an emulated slow link: does compression win end to end?

Puts each rank of examples/torch/fashion_mnist_ddp.py in a network namespace of its own, joined
by a Linux bridge in another namespace (10.77.0.x/24), shapes the egress of every rank's
interface with tc (tbf for the rate; netem for the rate and a one-way delay, where the kernel has
it) and runs the same training budget uncompressed and compressed on every link. Prints a table
of the time per step and the time to a target test accuracy beside the alpha-beta cost model of
docs/collectives.md, and the break-even bandwidth; writes slow_link.csv and slow_link.json
(every run's report) under --out. Needs root (exits 77, "skipped", without it).

  scripts/slow_link.py                                  # the default sweep (2 ranks)
  scripts/slow_link.py --links 1gbit:0ms,3gbit:0ms,10gbit:0ms --codecs none,q4:loco
  scripts/slow_link.py --quick                          # one link, a handful of steps (the test)

Every run also goes over the same namespaces without a qdisc ("unshaped"): its time per step is
the cost model's local time t_comp of that codec. Everything created is named cpsl-<pid>-...,
removed at the end, on failure and on Ctrl-C; leftovers of a run that died are removed at start.
"""

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "torch" / "fashion_mnist_ddp.py"
DATA_DIR = Path(os.environ.get("COMMPRESS_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
PREFIX = "cpsl-"
SKIP = 77
SUBNET = "10.77.0"
IFNAME = "eth0"  # every rank's interface, inside its namespace
BASE_PORT = 29500

DEFAULT_LINKS = "1gbit:0ms,1gbit:2ms,10gbit:0ms,10gbit:2ms"
# Uncompressed DDP (the example's default hook), 4-bit and 2-bit quantization (blocks of 128)
# with LoCo feedback (int8 error store, beta 0.8).
DEFAULT_CODECS = "none,q4:loco,q2:loco"
# The budget: 2 ranks x 32 images per step, 2 epochs over the first 12000 training images
# (374 steps), the first 2000 test images every 25 steps; the default sweep stays within about
# 15 minutes on 2 cores. The target is an accuracy the uncompressed run reaches about halfway.
EPOCHS = 2
TRAIN_LIMIT = 12000
EVAL_EVERY = 25
EVAL_LIMIT = 2000  # test images of those evaluations (the final accuracy uses all 10000)
WARMUP_STEPS = 10
TARGET = 0.78
# --quick: one strongly shaped link, uncompressed and 4-bit LoCo, 24 steps each.
QUICK_LINKS = "100mbit:0ms"
QUICK_CODECS = "none,q4:loco"
QUICK_TRAIN_LIMIT = 1536
QUICK_WARMUP_STEPS = 4

UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


class Skip(Exception):
    """The host cannot run the experiment (not root, no namespaces, no data): exit 77."""


class Link:
    def __init__(self, spec):
        self.spec = spec
        if spec == "unshaped":
            self.rate, self.delay_ms = None, 0.0
            return
        m = re.fullmatch(r"([0-9.]+)([kmgt]?bit):([0-9.]+)ms", spec.strip().lower())
        if not m:
            raise ValueError(f"link {spec!r}: expected RATE:DELAY such as 1gbit:2ms")
        self.rate = float(m.group(1)) * UNITS[m.group(2)]
        self.delay_ms = float(m.group(3))

    @property
    def gbit(self):
        return self.rate / 1e9 if self.rate else None


class Codec:
    def __init__(self, spec):
        self.spec = spec
        self.name, _, self.feedback = spec.partition(":")
        if self.name == "none":
            self.feedback = "none"
        elif not self.feedback:
            self.feedback = "loco"

    @property
    def compressed(self):
        return self.name != "none"

    @property
    def label(self):
        return "uncompressed" if not self.compressed else f"{self.name} + {self.feedback}"


def sh(*cmd, check=True, quiet=False):
    """Runs a command; returns its stdout."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: {r.stderr.strip() or r.stdout.strip()}")
    if not quiet and r.returncode != 0:
        print(f"slow_link: {' '.join(map(str, cmd))}: {r.stderr.strip()}", file=sys.stderr)
    return r.stdout


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_netns_pids(ns):
    """Kills what still runs in one of this script's namespaces (ranks it started)."""
    for pid in sh("ip", "netns", "pids", ns, check=False, quiet=True).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def remove_leftovers():
    """Namespaces (with their veths and qdiscs) and root links of runs that are no longer alive."""
    for line in sh("ip", "netns", "list", check=False, quiet=True).splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
        if not m or (alive(int(m.group(1))) and int(m.group(1)) != os.getpid()):
            continue
        kill_netns_pids(name)
        sh("ip", "netns", "del", name, check=False, quiet=True)
        print(f"slow_link: removed the leftover namespace {name}", file=sys.stderr)
    for line in sh("ip", "-o", "link", "show", check=False, quiet=True).splitlines():
        m = re.match(r"\d+: (" + re.escape(PREFIX) + r"[^:@]+)", line)
        if m:
            sh("ip", "link", "del", m.group(1), check=False, quiet=True)
            print(f"slow_link: removed the leftover link {m.group(1)}", file=sys.stderr)


class Network:
    """N rank namespaces, each with IFNAME (10.77.0.<rank+1>/24) on a bridge in its own
    namespace. Names carry this process's id: cpsl-<pid>-br, cpsl-<pid>-r<rank>."""

    def __init__(self, ranks):
        self.ranks = ranks
        tag = f"{PREFIX}{os.getpid()}"
        self.bridge_ns = f"{tag}-br"
        self.rank_ns = [f"{tag}-r{i}" for i in range(ranks)]
        self.created = []
        self.netem = False

    def address(self, rank):
        return f"{SUBNET}.{rank + 1}"

    def up(self):
        for ns in [self.bridge_ns] + self.rank_ns:
            r = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
            if r.returncode != 0:
                raise Skip(f"'ip netns add {ns}' failed ({r.stderr.strip()}): no network namespaces here")
            self.created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        b = self.bridge_ns
        sh("ip", "-n", b, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", b, "link", "set", "br0", "up")
        for i, ns in enumerate(self.rank_ns):
            sh("ip", "link", "add", IFNAME, "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", b)
            sh("ip", "-n", b, "link", "set", f"p{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", IFNAME)
            sh("ip", "-n", ns, "link", "set", IFNAME, "up")
        # netem (delay) is a kernel option; tbf (rate only) is the fallback.
        probe = subprocess.run(["ip", "netns", "exec", b, "tc", "qdisc", "add", "dev", "lo", "root",
                                "netem", "delay", "1ms"], capture_output=True, text=True)
        self.netem = probe.returncode == 0
        if self.netem:
            sh("ip", "netns", "exec", b, "tc", "qdisc", "del", "dev", "lo", "root", check=False)
        self.wait_up()

    def wait_up(self):
        """Until every rank's interface has its carrier (the bridge has no STP: its ports
        forward at once)."""
        for _ in range(100):
            states = [sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{IFNAME}/operstate").strip()
                      for ns in self.rank_ns]
            if all(st == "up" for st in states):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the ranks' interfaces did not come up: {states}")

    def supports(self, link):
        return link.delay_ms == 0 or self.netem

    def shape(self, link):
        """The same egress qdisc on every rank's interface (none for the unshaped link)."""
        for ns in self.rank_ns:
            tc = ["ip", "netns", "exec", ns, "tc", "qdisc"]
            sh(*tc, "del", "dev", IFNAME, "root", check=False, quiet=True)
            if link.rate is None:
                continue
            rate = f"{int(link.rate)}bit"
            if link.delay_ms > 0:
                sh(*tc, "add", "dev", IFNAME, "root", "netem", "delay", f"{link.delay_ms}ms",
                   "rate", rate, "limit", "100000")
            else:
                # A bucket of 64 KiB (or 100 us of the rate), far below one step's bytes; a
                # queue of 50 ms, so that TCP sees delay, not loss.
                burst = max(65536, int(link.rate / 8 * 1e-4))
                limit = max(4 << 20, int(link.rate / 8 * 0.05))
                sh(*tc, "add", "dev", IFNAME, "root", "tbf", "rate", rate, "burst", str(burst),
                   "limit", str(limit))

    def qdisc(self, rank):
        return sh("ip", "netns", "exec", self.rank_ns[rank], "tc", "qdisc", "show", "dev", IFNAME,
                  check=False, quiet=True).strip()

    def tx_bytes(self, rank):
        out = sh("ip", "netns", "exec", self.rank_ns[rank], "cat",
                 f"/sys/class/net/{IFNAME}/statistics/tx_bytes")
        return int(out.strip())

    def down(self):
        for ns in reversed(self.created):
            kill_netns_pids(ns)
            sh("ip", "netns", "del", ns, check=False, quiet=True)
        self.created = []


def run_one(net, link, codec, a, out, index, python):
    """One training run: every rank in its namespace; returns rank 0's report plus the bytes
    every rank's interface sent, or None if a rank failed."""
    name = f"{index:02d}-{link.spec.replace(':', '-')}-{codec.spec.replace(':', '-')}"
    report = out / f"{name}.json"
    report.unlink(missing_ok=True)
    port = BASE_PORT + index
    env = dict(os.environ, GLOO_SOCKET_IFNAME=IFNAME, OMP_NUM_THREADS="1")
    tx0 = [net.tx_bytes(r) for r in range(a.ranks)]
    procs, logs = [], []
    t0 = time.monotonic()
    try:
        for r in range(a.ranks):
            cmd = ["ip", "netns", "exec", net.rank_ns[r], python, str(EXAMPLE),
                   "--rank", str(r), "--world-size", str(a.ranks), "--master-addr", net.address(0),
                   "--master-port", str(port), "--codec", codec.name, "--feedback", codec.feedback,
                   "--epochs", str(a.epochs), "--train-limit", str(a.train_limit), "--batch", str(a.batch),
                   "--eval-every", str(a.eval_every), "--eval-limit", str(a.eval_limit),
                   "--warmup-steps", str(a.warmup_steps),
                   "--timeout", str(a.timeout)]
            if r == 0:
                cmd += ["--report-json", str(report)]
            log = open(out / f"{name}.rank{r}.log", "w")
            logs.append(log)
            log.write(" ".join(cmd) + "\n")
            log.flush()
            # A session of its own: Ctrl-C reaches this driver only, which then ends the ranks.
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))
        deadline = t0 + a.timeout
        while any(p.poll() is None for p in procs):
            if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                break  # a rank died (the others would wait for it) or the run is too slow
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    wall = time.monotonic() - t0
    codes = [p.returncode for p in procs]
    if any(c != 0 for c in codes) or not report.exists():
        why = "timed out" if wall > a.timeout else f"exit codes {codes}"
        print(f"slow_link: {link.spec} {codec.label}: FAILED ({why}; see {out}/{name}.rank*.log)",
              file=sys.stderr)
        return None
    rep = json.loads(report.read_text())
    rep["wire_bytes"] = [net.tx_bytes(r) - tx0[r] for r in range(a.ranks)]
    rep["driver_wall_seconds"] = wall
    rep["link"], rep["qdisc"] = link.spec, net.qdisc(0)
    rep["load_after"] = os.getloadavg()[0]  # the 1-minute load average, the ranks' own included
    return rep


def time_to_target(rep, target):
    for e in rep["evals"]:
        if e["accuracy"] >= target:
            return e["seconds"], e["step"]
    return None, None


def rounds(codec, ranks, buckets):
    """Sequential messages per step (the cost model's m): a ring all-reduce is 2(N-1); the hook
    sends per bucket a configuration all-gather (N-1), the uncompressed biases' all-reduce
    2(N-1) and the payloads' all-gather (N-1)."""
    return buckets * (2 * (ranks - 1) if not codec.compressed else 4 * (ranks - 1))


def fit(points):
    """Least squares T = a + b / R over (R, T) points: the cost model is affine in 1/R."""
    xs = [1 / r for r, _ in points]
    ys = [t for _, t in points]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def break_even(a_u, b_u, a_c, b_c):
    """Where T_c - T_u = (a_c - a_u) + (b_c - b_u) / R changes sign: (rate, "below") when
    compression is faster below that rate, (rate, "above") when above it, (None, "always") or
    (None, "never")."""
    da, db = a_c - a_u, b_c - b_u
    if da > 0 and db < 0:
        return -db / da, "below"
    if da < 0 and db > 0:
        return db / -da, "above"
    if da <= 0 and db <= 0:
        return None, "always"
    return None, "never"


def describe(be):
    rate, kind = be
    if rate is None:
        return "at every rate" if kind == "always" else "at no rate"
    return f"{kind} {rate / 1e9:.2f} Gbit/s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"one link ({QUICK_LINKS}), 2 codecs, a few steps")
    ap.add_argument("--ranks", type=int, default=2, help="2 to 4 namespaces (default 2)")
    ap.add_argument("--links", default=None, help=f"comma-separated RATE:DELAY (default {DEFAULT_LINKS})")
    ap.add_argument("--codecs", default=None,
                    help=f"comma-separated CODEC[:FEEDBACK] of the example's CODECS and FEEDBACK; "
                         f"none = uncompressed DDP (default {DEFAULT_CODECS})")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--train-limit", type=int, default=None)
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--eval-every", type=int, default=None, help="steps between test evaluations")
    ap.add_argument("--eval-limit", type=int, default=EVAL_LIMIT, help="test images of those evaluations")
    ap.add_argument("--warmup-steps", type=int, default=None, help="steps left out of the time per step")
    ap.add_argument("--target", type=float, default=TARGET, help="target test accuracy (fraction)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    ap.add_argument("--python", default=None, help="the ranks' interpreter (default .venv/bin/python)")
    ap.add_argument("--out", default=None, help="results directory (default results/slow_link)")
    ap.add_argument("--plot", nargs="+", default=None, metavar=("PNG", "CSV"),
                    help="only draw PNG from the CSVs of earlier sweeps, then exit")
    a = ap.parse_args()
    if a.plot:
        if len(a.plot) < 2:
            ap.error("--plot PNG CSV [CSV ...]")
        return 0 if plot(a.plot[1:], a.plot[0]) else 1
    if not 2 <= a.ranks <= 4:
        ap.error("--ranks: 2 to 4")
    links = [Link(s) for s in (a.links or (QUICK_LINKS if a.quick else DEFAULT_LINKS)).split(",")]
    links = [l for l in links if l.rate is not None]  # the unshaped link always runs first
    codecs = [Codec(s) for s in (a.codecs or (QUICK_CODECS if a.quick else DEFAULT_CODECS)).split(",")]
    if not any(not c.compressed for c in codecs):
        codecs.insert(0, Codec("none"))  # the reference of every comparison
    a.epochs = a.epochs or (1 if a.quick else EPOCHS)
    a.train_limit = a.train_limit or (QUICK_TRAIN_LIMIT if a.quick else TRAIN_LIMIT)
    a.eval_every = a.eval_every if a.eval_every is not None else (0 if a.quick else EVAL_EVERY)
    a.warmup_steps = a.warmup_steps if a.warmup_steps is not None else (
        QUICK_WARMUP_STEPS if a.quick else WARMUP_STEPS)
    python = a.python or str(ROOT / ".venv" / "bin" / "python")
    out = Path(a.out) if a.out else ROOT / "results" / "slow_link"

    if os.geteuid() != 0:
        print("slow_link: skipped: network namespaces and tc need root", file=sys.stderr)
        return SKIP
    for tool in ("ip", "tc"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            print(f"slow_link: skipped: {tool} not found (iproute2)", file=sys.stderr)
            return SKIP
    if not DATA_DIR.is_dir():
        print(f"slow_link: skipped: Fashion-MNIST not found in {DATA_DIR}", file=sys.stderr)
        return SKIP
    if subprocess.run([python, "-c", "import torch, commpress.torch"], capture_output=True).returncode:
        print(f"slow_link: skipped: {python} cannot import torch and commpress (scripts/setup.sh)",
              file=sys.stderr)
        return SKIP
    out.mkdir(parents=True, exist_ok=True)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    remove_leftovers()
    net = Network(a.ranks)
    load_start = os.getloadavg()
    t_start = time.monotonic()
    reports = {}  # (link spec, codec spec) -> report
    skipped = []
    try:
        net.up()
        print(f"slow_link: {a.ranks} ranks in namespaces {net.rank_ns[0]}..{net.rank_ns[-1]}, bridge in "
              f"{net.bridge_ns}; {a.epochs} epochs on {a.train_limit} images, batch {a.batch} per rank; "
              f"qdisc {'netem' if net.netem else 'tbf (this kernel has no netem: no delay)'}; "
              f"load average {load_start[0]:.2f}; results in {out}", flush=True)
        index = 0
        for link in [Link("unshaped")] + links:
            if not net.supports(link):
                skipped.append(link)
                print(f"slow_link: {link.spec}: skipped, a delay needs the netem qdisc (CONFIG_NET_SCH_NETEM)",
                      flush=True)
                continue
            net.shape(link)
            for codec in codecs:
                rep = run_one(net, link, codec, a, out, index, python)
                index += 1
                if rep is None:
                    continue
                reports[(link.spec, codec.spec)] = rep
                tt, _ = time_to_target(rep, a.target)
                print(f"  {link.spec:12s} {codec.label:14s} {1e3 * rep['step_seconds_median']:8.2f} ms/step  "
                      f"accuracy {100 * rep['accuracy']:.2f}%  to {100 * a.target:.0f}%: "
                      f"{'-' if tt is None else f'{tt:.1f} s'}  ({rep['driver_wall_seconds']:.0f} s, "
                      f"load {rep['load_after']:.2f})",
                      flush=True)
    except KeyboardInterrupt as e:
        print(f"slow_link: interrupted ({str(e) or 'Ctrl-C'}); cleaning up", file=sys.stderr)
        return 130
    except Skip as e:
        print(f"slow_link: skipped: {e}", file=sys.stderr)
        return SKIP
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        net.down()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    wall = time.monotonic() - t_start
    load_end = os.getloadavg()
    return summarize(a, links, codecs, skipped, reports, out, wall, load_start, load_end)


def plot(csv_paths, png):
    """Time per step against the link's rate, one line per codec and sweep (the CSVs this
    script writes), the unshaped run as a dashed level. Returns False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("slow_link: no matplotlib (Debian: python3-matplotlib): no plot", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(6, 3.8))
    colors = {}
    for i, path in enumerate(csv_paths):
        with open(path) as f:
            rows = [r for r in csv.DictReader(f) if float(r["delay_ms"] or 0) == 0]
        for key in dict.fromkeys((r["codec"], r["feedback"]) for r in rows):
            label = Codec(f"{key[0]}:{key[1]}").label
            color = colors.setdefault(key, f"C{len(colors)}")
            pts = sorted((float(r["rate_gbit"]), float(r["step_ms"])) for r in rows
                         if (r["codec"], r["feedback"]) == key and r["rate_gbit"])
            ax.plot([x for x, _ in pts], [y for _, y in pts], "os^v"[i % 4] + "-", color=color, alpha=max(0.4, 0.9 - 0.2 * i),
                    label=f"{label}" + (f" (sweep {i + 1})" if len(csv_paths) > 1 else ""))
            unshaped = [float(r["step_ms"]) for r in rows if (r["codec"], r["feedback"]) == key and not r["rate_gbit"]]
            if unshaped:
                ax.axhline(unshaped[0], color=color, ls="--", lw=0.8, alpha=max(0.4, 0.9 - 0.2 * i))
    ax.set_xscale("log")
    ax.set_xlabel("link rate (Gbit/s); dashed: unshaped")
    ax.set_ylabel("median time per step (ms)")
    ax.set_title("DDP on an emulated link: time per step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return True


def summarize(a, links, codecs, skipped, reports, out, wall, load_start, load_end):
    ran = [l for l in links if l not in skipped]
    base = {c.spec: reports.get(("unshaped", c.spec)) for c in codecs}
    buckets = next((r["buckets"] for r in reports.values() if r.get("buckets")), 1)
    rows = []
    for link in [Link("unshaped")] + ran:
        ref = reports.get((link.spec, "none"))
        for c in codecs:
            rep = reports.get((link.spec, c.spec))
            if rep is None:
                continue
            tt, st = time_to_target(rep, a.target)
            model = None
            if base[c.spec] is not None and link.rate:
                # Alpha-beta model: the codec's unshaped time per step + B/bw + m * one-way delay.
                model = (base[c.spec]["step_seconds_median"] + 8 * rep["bytes_per_step"] / link.rate
                         + rounds(c, a.ranks, buckets) * link.delay_ms / 1e3)
            rows.append({
                "link": link.spec, "rate_gbit": link.gbit or "", "delay_ms": link.delay_ms,
                "codec": c.name, "feedback": c.feedback, "ranks": a.ranks, "steps": rep["steps"],
                "step_ms": round(1e3 * rep["step_seconds_median"], 3),
                "step_ms_model": "" if model is None else round(1e3 * model, 3),
                "min_step_ms": "" if not link.rate else round(1e3 * 8 * rep["bytes_per_step"] / link.rate, 3),
                "speedup": "" if ref is None else round(ref["step_seconds_median"] / rep["step_seconds_median"], 3),
                "train_s": round(rep["seconds"], 3), "wall_s": round(rep["wall_seconds"], 3),
                "time_to_target_s": "" if tt is None else round(tt, 3), "steps_to_target": "" if st is None else st,
                "final_accuracy": round(rep["accuracy"], 4),
                "bytes_per_step": round(rep["bytes_per_step"]),
                "wire_bytes_per_step": round(max(rep["wire_bytes"]) / rep["steps"]),
                "load_after": round(rep["load_after"], 2),
            })
    csv_path = out / "slow_link.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["link"])
        w.writeheader()
        w.writerows(rows)

    # Break-even per compressed codec and delay. Measured: where T_c - T_u changes sign between
    # two neighbouring swept rates, interpolated linearly in 1/R (the cost model's time is affine
    # in 1/R); the unshaped run stands at 1/R = 0. Fitted: T = a + b/R by least squares over the
    # same points. Model: (B_u - B_c) / (t_c - t_u + latency) from the unshaped runs.
    lines = []
    summary = []
    for c in [c for c in codecs if c.compressed]:
        for delay in sorted({l.delay_ms for l in ran}):
            pts = []  # (1/R, T_u, T_c), fastest first
            for l in [Link("unshaped")] + [l for l in ran if l.delay_ms == delay]:
                u, k = reports.get((l.spec, "none")), reports.get((l.spec, c.spec))
                if u is not None and k is not None and (l.rate or delay == 0):
                    pts.append((1 / l.rate if l.rate else 0.0, u["step_seconds_median"], k["step_seconds_median"]))
            pts.sort()
            if len(pts) < 2:
                continue
            crossings = []
            for (x0, u0, c0), (x1, u1, c1) in zip(pts, pts[1:]):
                d0, d1 = c0 - u0, c1 - u1
                if (d0 > 0) != (d1 > 0):
                    x = x0 + (x1 - x0) * d0 / (d0 - d1)
                    crossings.append({"rate": 1 / x if x > 0 else float("inf"),
                                      "between_gbit": [1e-9 / x1 if x1 else None, 1e-9 / x0 if x0 else None],
                                      "below": d1 < 0})
            a_u, b_u = fit([(1 / x if x else float("inf"), t) for x, t, _ in pts])
            a_c, b_c = fit([(1 / x if x else float("inf"), t) for x, _, t in pts])
            fitted = break_even(a_u, b_u, a_c, b_c)
            entry = {"codec": c.spec, "delay_ms": delay, "crossings": crossings, "fit": fitted,
                     "fit_params": {"none": [a_u, b_u], c.spec: [a_c, b_c]},
                     "points": [{"rate_gbit": 1e-9 / x if x else None, "step_s_none": u, "step_s_codec": k}
                                for x, u, k in pts]}
            model = ""
            if base["none"] is not None and base[c.spec] is not None:
                bu = reports[("unshaped", "none")]["bytes_per_step"]
                bc = reports[("unshaped", c.spec)]["bytes_per_step"]
                m = (rounds(c, a.ranks, buckets) - rounds(Codec("none"), a.ranks, buckets)) * delay / 1e3
                entry["model"] = break_even(base["none"]["step_seconds_median"], 8 * bu,
                                            base[c.spec]["step_seconds_median"] + m, 8 * bc)
                model = f"; cost model {describe(entry['model'])}"
            summary.append(entry)

            def span(cr):
                lo, hi = cr["between_gbit"]
                return f"{lo:g} and {'unshaped' if hi is None else f'{hi:g} Gbit/s'}"

            if crossings:
                measured = "; ".join(f"{'below' if cr['below'] else 'above'} {cr['rate'] / 1e9:.2f} Gbit/s "
                                     f"(between {span(cr)})" for cr in crossings)
            else:
                measured = "at every swept rate" if pts[-1][2] < pts[-1][1] else "at no swept rate"
            lines.append(f"  {c.label:14s} delay {delay:g} ms: faster {measured}; fit {describe(fitted)}{model}")

    host = {"cpus": os.cpu_count(), "load_start": load_start, "load_end": load_end}
    try:
        host["lscpu"] = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        pass
    (out / "slow_link.json").write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": host, "wall_seconds": wall,
        "settings": {"ranks": a.ranks, "epochs": a.epochs, "train_limit": a.train_limit, "batch": a.batch,
                     "eval_every": a.eval_every, "eval_limit": a.eval_limit, "warmup_steps": a.warmup_steps,
                     "target": a.target},
        "skipped_links": [l.spec for l in skipped], "break_even": summary, "rows": rows,
        "runs": [dict(r, codec_spec=k[1]) for k, r in reports.items()],
    }, indent=1) + "\n")

    print()
    print(f"{a.ranks} ranks, {a.epochs} epochs on {a.train_limit} images, batch {a.batch} per rank; "
          f"median time per step after {a.warmup_steps} steps; target {100 * a.target:.0f}% test accuracy; "
          f"load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; {wall / 60:.1f} min")
    print(f"| link | codec | ms/step | model ms/step | speedup | time to {100 * a.target:.0f}% (s) | "
          f"final acc (%) | KiB/step | wire KiB/step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        label = Codec(f"{r['codec']}:{r['feedback']}").label
        print(f"| {r['link']} | {label} | {r['step_ms']:.2f} | "
              f"{'-' if r['step_ms_model'] == '' else format(r['step_ms_model'], '.2f')} | "
              f"{'-' if r['speedup'] == '' else format(r['speedup'], '.2f') + 'x'} | "
              f"{'-' if r['time_to_target_s'] == '' else format(r['time_to_target_s'], '.1f')} | "
              f"{100 * r['final_accuracy']:.2f} | {r['bytes_per_step'] / 1024:.1f} | "
              f"{r['wire_bytes_per_step'] / 1024:.1f} |")
    if skipped:
        print(f"skipped (no netem in this kernel): {', '.join(l.spec for l in skipped)}")
    if lines:
        print("break-even bandwidth:")
        print("\n".join(lines))
    print(f"csv: {csv_path}\njson: {out / 'slow_link.json'}")
    if rows and plot([csv_path], out / "slow_link.png"):
        print(f"plot: {out / 'slow_link.png'}")
    expected = (1 + len(ran)) * len(codecs)
    return 0 if len(rows) == expected else 1


if __name__ == "__main__":
    sys.exit(main())
