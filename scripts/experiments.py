#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Runs the Fashion-MNIST compression experiments and summarises them.

Model parallel (Rudakov et al., docs/methods.md section 4) with examples/fashion_mnist/
model_parallel, data parallel (LoCo, Xie et al., section 7) with data_parallel. Every run writes
a per-epoch CSV under --out; the driver then writes summary.md (markdown tables) and PNG plots
(python3-matplotlib; skipped with a note if it is missing) and prints the summary.

With --resnet the same grid runs on a ResNet-18 with BatchNorm in PyTorch
(examples/torch/fashion_mnist_pipeline.py, StageBoundary at 3 stage cuts), and LoCo and 1-bit
Adam run on it through the DDP hook on 4 gloo processes (examples/torch/fashion_mnist_ddp.py).

  scripts/experiments.py                 # the MLP sweep
  scripts/experiments.py --resnet        # the ResNet sweep (docs/results.md has its wall time)
  scripts/experiments.py --quick         # the demo: a handful of configurations of both
  scripts/experiments.py --only topk     # one group of a sweep

Seeds are fixed: --seed (default 1) for the MLP runs; the ResNet runs use seeds 1 to 3 (every
configuration under seed 1, the headline ones under all three). The same command gives the same
numbers on the same kind of machine (the C++ examples are built with -march=native, see
examples/CMakeLists.txt). Every run's rows also land in <out>/runs.csv, which --summarize-only
reads where the per-run CSVs are gone (docs/data/resnet_runs.csv is the ResNet sweep's).
"""

import argparse
import concurrent.futures
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Full sweep: 3 epochs (AQ-SGD: 1 warm-up + 2) on the first 30000 training samples keep the 55
# runs within about 25 minutes on a busy 2-core machine with 2 runs in parallel (docs/results.md).
FULL_EPOCHS = 3
FULL_SUBSET = 30000
QUICK_EPOCHS = 2
QUICK_SUBSET = 20000
BITS = [2, 4, 6, 8, 32]
TOPK = [5, 10, 20, 30, 50]
# Data parallel: 4 workers x 128 samples (global batch 512), Adam lr 1e-3. LoCo's quantizer:
# symmetric absmax per block of 128, round to nearest (docs/methods.md 7.1).
DP_COMMON = ["--workers", "4", "--batch-per-worker", "128", "--optimizer", "adam", "--lr", "0.001"]


def qspec(bits):
    """Rudakov's quantize_custom (per-tensor min-max, nearest) at `bits`; 32 = no compression."""
    return "fp32" if bits == 32 else f"q{bits}"


def dpq(bits):
    return f"q{bits}:block128:sym"


class Run:
    def __init__(self, name, group, kind, args, label=None, meta=None, seed=None, config=None):
        self.name, self.group, self.kind, self.args = name, group, kind, args
        self.label = label or name
        self.meta = meta or {}
        self.seed = seed  # None: the driver's --seed
        self.config = config or name  # runs of one configuration under several seeds share it


def mp(name, group, fwd, bwd, feedback="none", label=None, **meta):
    args = ["--fwd", fwd, "--bwd", bwd, "--feedback", feedback]
    meta.update(fwd=fwd, bwd=bwd, feedback=feedback)
    return Run(name, group, "mp", args, label, meta)


def dp(name, label, args, **meta):
    return Run(name, "loco", "dp", DP_COMMON + args, label, meta)


def dp_runs():
    runs = [dp("dp-fp32", "fp32 all-gather", ["--codec", "fp32", "--feedback", "none"])]
    for b in (4, 2):
        runs += [
            dp(f"dp-q{b}", f"{b}-bit plain", ["--codec", dpq(b), "--feedback", "none"]),
            dp(f"dp-q{b}-ef", f"{b}-bit EF", ["--codec", dpq(b), "--feedback", "ef"]),
            dp(f"dp-q{b}-loco", f"{b}-bit LoCo (beta 0.8, 8-bit error)",
               ["--codec", dpq(b), "--feedback", "loco:int8", "--beta", "0.8"]),
        ]
    onebit = ["--optimizer", "onebit_adam", "--codec", "sign", "--feedback", "ef"]
    runs.append(dp("dp-onebit", "1-bit Adam (sign + EF, 20% warm-up, variance floor 1e-8)",
                   onebit + ["--variance-floor", "1e-8"]))
    runs.append(dp("dp-onebit-nofloor", "1-bit Adam without a variance floor (DeepSpeed's)",
                   onebit))
    return runs


def full_runs():
    runs = []
    for a in BITS:
        for g in BITS:
            runs.append(mp(f"mp-q-a{a}-g{g}", "quant", qspec(a), qspec(g), act_bits=a, grad_bits=g))
    for k in TOPK:
        runs.append(mp(f"mp-topk{k}", "topk", f"topk{k}", f"topk{k}", percent=k))
    for fb in ("ef", "ef21"):
        for c in ("topk10", "q2", "q4"):
            runs.append(mp(f"mp-{fb}-{c}", "ef", c, c, fb))
    for c in ("topk10", "topk30", "topk50", "q2", "q4"):
        runs.append(mp(f"mp-aqsgd-{c}", "aqsgd", c, c, "aq_sgd", storage="f32"))
    for st in ("bf16", "int8", "int4"):
        for c in ("topk30", "q4"):
            runs.append(mp(f"mp-aqsgd-{c}-{st}", "aqsgd", c, c, f"aq_sgd:{st}", storage=st))
    return runs + dp_runs()


# ResNet-18 at width 8 with BatchNorm, 4 stages (examples/torch/fashion_mnist_pipeline.py), 3
# epochs on the first 12800 training images (300 steps of 128), a budget chosen so the whole
# sweep fits a 2-core machine (docs/results.md). The configurations behind the papers' headline
# claims run under 3 seeds, the rest of the grid under seed 1.
RN_EPOCHS = 3
RN_SUBSET = 12800
RN_SEEDS = (1, 2, 3)
RN_QUICK_EPOCHS = 2
RN_QUICK_SUBSET = 6400
RN_SCRIPT = ROOT / "examples" / "torch" / "fashion_mnist_pipeline.py"
RN_HEADLINE = {"rn-q-a32-g32", "rn-q-a2-g8", "rn-qc-a2-g8", "rn-q-a4-g32", "rn-q-a32-g2", "rn-q-a32-g4",
               "rn-qc-a32-g4", "rn-topk10", "rn-topk30", "rn-ef-topk10", "rn-ef21-topk10",
               "rn-aqsgd-topk10", "rn-aqsgd-topk30"}


# The runs whose training loss per epoch docs/results.md plots.
RN_LOSS_CURVES = ("rn-q-a32-g32", "rn-q-a2-g8", "rn-qc-a2-g8", "rn-q-a32-g4", "rn-qc-a2-g2", "rn-topk10",
                  "rn-ef-topk10", "rn-ef21-topk10", "rn-aqsgd-topk10")


def rn(name, group, act, grad, feedback="none", label=None, seed=1, **meta):
    args = ["--act", act, "--grad", grad, "--feedback", feedback]
    meta.update(act=act, grad=grad, feedback=feedback)
    return Run(name if seed == 1 else f"{name}-s{seed}", group, "rn", args, label, meta, seed, name)


def rn_configs():
    runs = []
    for scope, tag in (("", "q"), (":channel", "qc")):
        for a in BITS:
            for g in BITS:
                if tag == "qc" and a == g == 32:
                    continue  # the same run as rn-q-a32-g32
                act = "fp32" if a == 32 else f"q{a}{scope}"
                grad = "fp32" if g == 32 else f"q{g}{scope}"
                scope_name = "per tensor" if tag == "q" else "per channel"
                label = ("fp32" if a == g == 32 else
                         f"{'fp32' if a == 32 else f'{a}-bit'} act, {'fp32' if g == 32 else f'{g}-bit'} grad, {scope_name}")
                runs.append(rn(f"rn-{tag}-a{a}-g{g}", f"rn-{tag}", act, grad, "none", label, act_bits=a,
                               grad_bits=g))
    def name(c):
        return f"TopK {c[4:]}%" if c.startswith("topk") else f"{c[1:]}-bit"

    for k in TOPK:
        runs.append(rn(f"rn-topk{k}", "rn-topk", f"topk{k}", f"topk{k}", label=f"TopK {k}%", percent=k))
    for fb in ("ef", "ef21"):
        for c in ("topk10", "q2", "q4"):
            runs.append(rn(f"rn-{fb}-{c}", "rn-ef", c, c, fb, label=f"{fb.upper()} + {name(c)}"))
    for c in ("topk10", "topk30", "topk50", "q2", "q4"):
        runs.append(rn(f"rn-aqsgd-{c}", "rn-aqsgd", c, c, "aq_sgd", label=f"AQ-SGD, {name(c)}, f32 buffers",
                       storage="f32"))
    for st in ("bf16", "int8", "int4"):
        for c in ("topk30", "q4"):
            runs.append(rn(f"rn-aqsgd-{c}-{st}", "rn-aqsgd", c, c, f"aq_sgd:{st}",
                           label=f"AQ-SGD, {name(c)}, {st} buffers", storage=st))
    return runs


# Data parallel on the same ResNet through the DDP hook (examples/torch/fashion_mnist_ddp.py):
# 4 gloo processes x 32 images (global batch 128, as the model-parallel runs), Adam lr 1e-3,
# LoCo's quantizer. One run at a time: each takes both cores.
DDP_SCRIPT = ROOT / "examples" / "torch" / "fashion_mnist_ddp.py"
DDP_COMMON = ["--ranks", "4", "--model", "resnet", "--optimizer", "adam", "--lr", "0.001", "--batch", "32",
              "--eval-limit", "1000", "--no-baseline"]
DDP_HEADLINE = {"ddp-fp32", "ddp-q4-ef", "ddp-q4-loco", "ddp-q2-ef", "ddp-q2-loco", "ddp-onebit",
                "ddp-onebit-sharded"}


def ddp(name, label, codec, feedback="none", collective="auto", seed=1, extra=()):
    args = DDP_COMMON + ["--codec", codec, "--feedback", feedback, "--collective", collective] + list(extra)
    return Run(name if seed == 1 else f"{name}-s{seed}", "rn-ddp", "ddp", args, label,
               dict(codec=codec, feedback=feedback, collective=collective, extra=list(extra)), seed, name)


def ddp_configs():
    runs = [ddp("ddp-fp32", "fp32 (DDP's all-reduce)", "none")]
    for b in (4, 2):
        runs += [ddp(f"ddp-q{b}", f"{b}-bit plain", f"q{b}"),
                 ddp(f"ddp-q{b}-ef", f"{b}-bit EF", f"q{b}", "ef"),
                 ddp(f"ddp-q{b}-loco", f"{b}-bit LoCo (beta 0.8, 8-bit error)", f"q{b}", "loco"),
                 ddp(f"ddp-q{b}-loco-sharded", f"{b}-bit LoCo, sharded (worker and server error)",
                     f"q{b}", "loco", "sharded")]
    onebit = ["--optimizer", "onebit_adam", "--variance-floor", "1e-8"]
    runs.append(ddp("ddp-onebit", "1-bit Adam (sign + EF, 20% warm-up, variance floor 1e-8)", "sign", "ef",
                    extra=onebit))
    runs.append(ddp("ddp-onebit-sharded", "1-bit Adam, DeepSpeed's exchange (worker and server error)", "sign",
                    "ef", extra=onebit + ["--onebit-exchange", "sharded"]))
    return runs


def resnet_runs():
    """Every configuration under seed 1 (the headline ones first), then the headline ones under
    the other seeds."""
    configs = sorted(rn_configs(), key=lambda r: r.config not in RN_HEADLINE)
    extra = [rn(r.config, r.group, r.meta["act"], r.meta["grad"], r.meta["feedback"], r.label, seed=s,
                **{k: v for k, v in r.meta.items() if k not in ("act", "grad", "feedback")})
             for s in RN_SEEDS[1:] for r in configs if r.config in RN_HEADLINE]
    ddps = ddp_configs()
    ddps += [ddp(r.config, r.label, r.meta["codec"], r.meta["feedback"], r.meta["collective"], s,
                 r.meta["extra"])
             for s in RN_SEEDS[1:] for r in ddps if r.config in DDP_HEADLINE]
    return configs + extra + ddps


def quick_runs():
    return [
        mp("mp-fp32", "demo", "fp32", "fp32", label="MP: no compression"),
        mp("mp-a2-g8", "demo", "q2", "q8", label="MP: 2-bit activations, 8-bit gradients"),
        mp("mp-a8-g2", "demo", "q8", "q2", label="MP: 8-bit activations, 2-bit gradients"),
        mp("mp-topk10", "demo", "topk10", "topk10", label="MP: TopK 10% both directions"),
        mp("mp-ef21-topk10", "demo", "topk10", "topk10", "ef21",
           label="MP: EF21 + TopK 10% both directions"),
        dp("dp-fp32", "DP: Adam, fp32 all-gather", ["--codec", "fp32", "--feedback", "none"]),
        dp("dp-q2", "DP: Adam, 2-bit plain", ["--codec", dpq(2), "--feedback", "none"]),
        dp("dp-q2-loco", "DP: Adam, 2-bit LoCo",
           ["--codec", dpq(2), "--feedback", "loco:int8", "--beta", "0.8"]),
    ]


def quick_resnet_runs():
    return [
        rn("rn-q-a32-g32", "demo", "fp32", "fp32", label="ResNet: no compression"),
        rn("rn-q-a2-g8", "demo", "q2", "q8", label="ResNet: 2-bit activations, 8-bit gradients"),
        rn("rn-topk10", "demo", "topk10", "topk10", label="ResNet: TopK 10% both directions"),
    ]


def find_binary(build_dir, name):
    p = Path(build_dir) / "examples" / "fashion_mnist" / name
    if not p.exists():
        sys.exit(f"experiments: {p} not found; build the examples first "
                 f"(cmake --workflow --preset demo, or -DCOMMPRESS_BUILD_EXAMPLES=ON)")
    return p


def execute(run, bins, out, budget, seed):
    """budget: kind -> (epochs, train subset)."""
    csv_path = out / f"{run.name}.csv"
    log_path = out / f"{run.name}.log"
    epochs, subset = budget[run.kind]
    cmd = bins[run.kind] + run.args + ["--epochs", str(epochs), "--seed", str(run.seed or seed)]
    if run.kind == "ddp":  # a JSON report, turned into the common CSV below
        cmd += ["--train-limit", str(subset), "--report-json", str(out / f"{run.name}.json")]
    else:
        cmd += ["--csv", str(csv_path)]
        if subset or run.kind == "rn":
            cmd += ["--train-subset", str(subset)]
    if run.kind == "dp":
        cmd += ["--steps-csv", str(out / f"{run.name}.steps.csv")]
    if run.kind == "rn":
        cmd += ["--eval", "last"]
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if run.kind == "ddp" and rc == 0:
        ddp_csv(out / f"{run.name}.json", csv_path)
    return run, rc, time.monotonic() - t0


def ddp_csv(report, csv_path):
    """The DDP example's JSON report as one CSV row (the driver's common format)."""
    r = json.loads(Path(report).read_text())["runs"][0]
    with open(csv_path, "w") as f:
        f.write("epoch,test_acc,bytes_per_step,step_seconds_median,wall_s\n")
        f.write(f"{r['epochs']},{r['accuracy']},{r['bytes_per_step']},{r['step_seconds_median']},"
                f"{r['seconds']}\n")


def read_csv(path):
    with open(path) as f:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]


COMBINED = "runs.csv"


def read_combined(out):
    """run name -> rows of <out>/runs.csv (empty when there is none)."""
    combined = {}
    if (out / COMBINED).exists():
        with open(out / COMBINED) as f:
            for row in csv.DictReader(f):
                name = row.pop("run")
                combined.setdefault(name, []).append({k: float(v) for k, v in row.items() if v != ""})
    return combined


def write_combined(res, out):
    """Every row of every run in one CSV (a `run` column first): small enough to commit, and
    --summarize-only rebuilds the tables and plots from it where the per-run CSVs are gone. The
    runs of this call replace their earlier rows; other runs' rows stay."""
    rows_of = read_combined(out)
    rows_of.update(res.rows)
    cols = list(dict.fromkeys(k for rows in rows_of.values() for row in rows for k in row))
    with open(out / COMBINED, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run"] + cols)
        for name, rows in rows_of.items():
            for row in rows:
                w.writerow([name] + [repr(row[c]) if c in row else "" for c in cols])


def pct(x):
    return f"{100 * x:.2f}"


def mib(b):
    return f"{b / 2**20:.1f}"


class Results:
    def __init__(self, runs, out):
        self.by_name, self.rows, self.runs_of = {}, {}, {}
        combined = read_combined(out)
        for r in runs:
            p = out / f"{r.name}.csv"
            if p.exists() or r.name in combined:
                rows = read_csv(p) if p.exists() else combined[r.name]
                if rows:
                    self.by_name[r.name] = r
                    self.rows[r.name] = rows
                    self.runs_of.setdefault(r.config, []).append(r.name)

    def finals(self, config, col):
        """The last row's `col` of every seed of a configuration; accuracies of a run whose loss
        went non-finite read nan (diverged)."""
        def value(row):
            diverged = col.startswith("test_acc") and not math.isfinite(row.get("train_loss", 0.0))
            return math.nan if diverged else row[col]
        return [value(self.final(n)) for n in self.runs_of.get(config, [])]

    def final(self, name):
        return self.rows[name][-1]

    def best(self, name, col):
        return max(row[col] for row in self.rows[name])

    def has(self, name):
        return name in self.rows


def mp_row(res, name, label=None):
    f = res.final(name)
    base = res.final("mp-q-a32-g32") if res.has("mp-q-a32-g32") else (
        res.final("mp-fp32") if res.has("mp-fp32") else None)
    ratio = f"{base['bytes_per_step'] / f['bytes_per_step']:.1f}x" if base else "-"
    return (f"| {label or res.by_name[name].label} | {pct(f['test_acc_compressed'])} | "
            f"{pct(f['test_acc_uncompressed'])} | {pct(res.best(name, 'test_acc_compressed'))} | "
            f"{f['train_loss']:.4f} | {f['bytes_per_step'] / 1024:.1f} | {ratio} |")


MP_HEAD = ("| run | test acc, compressed inference (%) | test acc, uncompressed inference (%) | "
           "best compressed (%) | final train loss | KiB/step | vs fp32 |\n"
           "|---|---|---|---|---|---|---|")


def spread(values, scale=100.0, digits=2):
    """One value, or the mean +- the sample standard deviation (n) of several seeds; a run that
    diverged (nan) makes the cell say so."""
    if not values:
        return "-"
    bad = sum(1 for v in values if v != v)
    if bad:
        return "diverged" if bad == len(values) else f"{bad} of {len(values)} diverged"
    if len(values) == 1:
        return f"{scale * values[0]:.{digits}f}"
    return (f"{scale * statistics.fmean(values):.{digits}f} +- "
            f"{scale * statistics.stdev(values):.{digits}f} ({len(values)})")


RN_HEAD = ("| run | test acc, compressed inference (%) | test acc, uncompressed inference (%) | "
           "final train loss | KiB/step (last epoch) | vs fp32 |\n|---|---|---|---|---|---|")


def last_epoch_bytes(res, config):
    """Payload bytes per step of the last epoch (the CSV's column is the running mean): AQ-SGD's
    first epoch sends fp32 activations while its buffers fill."""
    rows = res.rows[res.runs_of[config][0]]
    if len(rows) < 2:
        return rows[-1]["bytes_per_step"]
    e = rows[-1]["epoch"]
    return e * rows[-1]["bytes_per_step"] - (e - 1) * rows[-2]["bytes_per_step"]


def rn_row(res, config, label=None, extra=""):
    sent = last_epoch_bytes(res, config)
    ratio = f"{last_epoch_bytes(res, 'rn-q-a32-g32') / sent:.1f}x" if res.runs_of.get("rn-q-a32-g32") else "-"
    return (f"| {label or res.by_name[res.runs_of[config][0]].label} | "
            f"{spread(res.finals(config, 'test_acc_compressed'))} | "
            f"{spread(res.finals(config, 'test_acc_uncompressed'))} | "
            f"{spread(res.finals(config, 'train_loss'), 1.0, 4)} | {sent / 1024:.1f} | {ratio} |{extra}")


def rn_summary(res):
    """The ResNet tables: cells are one seed, or mean +- std (seeds) where several ran."""
    lines = []
    for tag, title in (("q", "per-tensor min-max (Rudakov's quantize_custom)"),
                       ("qc", "min-max per sample and channel")):
        if not any(res.runs_of.get(f"rn-{tag}-a{a}-g{g}") for a in BITS for g in BITS):
            continue
        lines += [f"### ResNet quantization, {title}: test accuracy (%), compressed inference", "",
                  "Rows: activation bits (forward); columns: gradient bits (backward); 32 = "
                  "uncompressed.", "",
                  "| act \\ grad | " + " | ".join(str(g) for g in BITS) + " |",
                  "|---|" + "---|" * len(BITS)]
        for a in BITS:
            cells = [spread(res.finals("rn-q-a32-g32" if a == g == 32 else f"rn-{tag}-a{a}-g{g}",
                                       "test_acc_compressed")) for g in BITS]
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
        lines.append("")
    groups = (("rn-topk", "ResNet TopK per sample, both directions"),
              ("rn-ef", "ResNet EF / EF21 (both directions)"),
              ("rn-aqsgd", "ResNet AQ-SGD (activations; gradients with the same codec, no feedback)"),
              ("demo", "ResNet-18 (width 8), 3 compressed boundaries"))
    for group, title in groups:
        order = {r.config: i for i, r in enumerate(rn_configs())}  # the grid's order, not the run order
        configs = sorted(dict.fromkeys(r.config for n, r in res.by_name.items()
                                       if r.kind == "rn" and r.group == group),
                         key=lambda c: order.get(c, -1) if group != "demo" else 0)
        if not configs:
            continue
        if group == "rn-aqsgd":
            lines += [f"### {title}", "", RN_HEAD.replace("| vs fp32 |", "| vs fp32 | buffers (MiB) |")
                      .replace("|---|---|---|---|---|---|", "|---|---|---|---|---|---|---|")]
            lines += [rn_row(res, c, extra=f" {mib(res.finals(c, 'feedback_state_bytes')[0])} |")
                      for c in configs]
        else:
            lines += [f"### {title}", "", RN_HEAD] + [rn_row(res, c) for c in configs]
        lines.append("")
    ddps = list(dict.fromkeys(r.config for r in res.by_name.values() if r.kind == "ddp"))
    if ddps:
        base = res.finals("ddp-fp32", "bytes_per_step")
        fp32 = {res.by_name[n].seed: res.final(n)["test_acc"] for n in res.runs_of.get("ddp-fp32", [])}
        lines += ["### ResNet data parallel through the DDP hook (4 gloo processes, Adam)", "",
                  "| run | final test acc (%) | minus fp32 of the same seed (points) | KiB/step/rank | "
                  "vs fp32 | median step (ms) |", "|---|---|---|---|---|---|"]
        for c in ddps:
            sent = res.finals(c, "bytes_per_step")
            ratio = f"{base[0] / sent[0]:.1f}x" if base else "-"
            paired = [res.final(n)["test_acc"] - fp32[res.by_name[n].seed] for n in res.runs_of[c]
                      if res.by_name[n].seed in fp32]
            lines.append(f"| {res.by_name[res.runs_of[c][0]].label} | {spread(res.finals(c, 'test_acc'))} | "
                         f"{'-' if c == 'ddp-fp32' else spread(paired)} | {sent[0] / 1024:.1f} | {ratio} | "
                         f"{spread(res.finals(c, 'step_seconds_median'), 1000.0, 1)} |")
        lines.append("")
    return lines


def summary(res, quick):
    lines = []
    mp_names = [n for n, r in res.by_name.items() if r.kind == "mp"]
    dp_names = [n for n, r in res.by_name.items() if r.kind == "dp"]
    if quick:
        if mp_names:
            lines += ["### Model parallel (SGD, 3 compressed boundaries)", "", MP_HEAD]
            lines += [mp_row(res, n) for n in mp_names]
            lines.append("")
    else:
        if any(res.has(f"mp-q-a{a}-g{g}") for a in BITS for g in BITS):
            lines += ["### Quantization: final test accuracy (%), compressed inference",
                      "", "Rows: activation bits (forward); columns: gradient bits (backward). "
                      "Per-tensor min-max (Rudakov's quantize_custom); 32 = uncompressed.", "",
                      "| act \\ grad | " + " | ".join(str(g) for g in BITS) + " |",
                      "|---|" + "---|" * len(BITS)]
            for a in BITS:
                cells = [pct(res.final(f"mp-q-a{a}-g{g}")["test_acc_compressed"])
                         if res.has(f"mp-q-a{a}-g{g}") else "-" for g in BITS]
                lines.append(f"| {a} | " + " | ".join(cells) + " |")
            lines.append("")
        for group, title in (("topk", "TopK per sample, both directions"),
                             ("ef", "EF / EF21 (both directions)"),
                             ("aqsgd", "AQ-SGD (activations; gradients with the same codec, "
                                       "no feedback)")):
            names = [n for n in mp_names if res.by_name[n].group == group]
            if not names:
                continue
            if group == "aqsgd":
                lines += [f"### {title}", "",
                          MP_HEAD.replace("| vs fp32 |", "| vs fp32 | buffers (MiB) |")
                          .replace("|---|---|---|---|---|---|---|",
                                   "|---|---|---|---|---|---|---|---|")]
                for n in names:
                    lines.append(mp_row(res, n) + f" {mib(res.final(n)['feedback_state_bytes'])} |")
            else:
                lines += [f"### {title}", "", MP_HEAD] + [mp_row(res, n) for n in names]
            lines.append("")
    if dp_names:
        lines += ["### Data parallel (4 workers, Adam)", "",
                  "| run | final test acc (%) | best test acc (%) | final train loss | "
                  "KiB/step/worker | vs fp32 |", "|---|---|---|---|---|---|"]
        base = res.final("dp-fp32") if res.has("dp-fp32") else None
        for n in dp_names:
            f = res.final(n)
            ratio = f"{base['bytes_per_step'] / f['bytes_per_step']:.1f}x" if base else "-"
            lines.append(f"| {res.by_name[n].label} | {pct(f['test_acc'])} | "
                         f"{pct(res.best(n, 'test_acc'))} | {f['train_loss']:.4f} | "
                         f"{f['bytes_per_step'] / 1024:.1f} | {ratio} |")
        lines.append("")
    return "\n".join(lines + rn_summary(res))


def plots(res, out, img_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"experiments: {sys.executable} cannot import matplotlib (Debian: python3-matplotlib); "
              "no plots", file=sys.stderr)
        return []
    img_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, name):
        p = img_dir / name
        fig.tight_layout()
        fig.savefig(p, dpi=80)
        plt.close(fig)
        written.append(p)

    def acc(config, col="test_acc_compressed"):
        """Percent, the mean over the configuration's seeds."""
        v = res.finals(config, col)
        return 100 * statistics.fmean(v) if v else float("nan")

    def decorate(ax, xlabel, ylabel, title):
        ax.set_xlabel(xlabel)
        if ylabel:
            ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)

    def bits_lines(ax, cfg, title):
        """Accuracy against the bits of one direction (the other fp32) and of both."""
        xs = list(range(len(BITS)))
        ax.plot(xs, [acc(cfg(b, 32)) for b in BITS], "o-", label="activations quantized (gradients fp32)")
        ax.plot(xs, [acc(cfg(32, b)) for b in BITS], "s-", label="gradients quantized (activations fp32)")
        ax.plot(xs, [acc(cfg(b, b)) for b in BITS], "^--", label="both")
        ax.set_xticks(xs, [str(b) for b in BITS])
        decorate(ax, "bits per element at every boundary", None, title)

    def topk_lines(ax, prefix, title):
        """Accuracy against the TopK level, with AQ-SGD and EF / EF21 at the levels they ran."""
        ks = [k for k in TOPK if res.runs_of.get(f"{prefix}-topk{k}")]
        ax.plot(ks, [acc(f"{prefix}-topk{k}") for k in ks], "o-", label="TopK, compressed inference")
        ax.plot(ks, [acc(f"{prefix}-topk{k}", "test_acc_uncompressed") for k in ks], "o:",
                label="TopK, uncompressed inference")
        aq = [k for k in (10, 30, 50) if res.runs_of.get(f"{prefix}-aqsgd-topk{k}")]
        if aq:
            ax.plot(aq, [acc(f"{prefix}-aqsgd-topk{k}") for k in aq], "s-", label="AQ-SGD + TopK")
        for fb, mark in (("ef", "v"), ("ef21", "D")):
            if res.runs_of.get(f"{prefix}-{fb}-topk10"):
                ax.plot([10], [acc(f"{prefix}-{fb}-topk10")], mark, label=f"{fb.upper()} + TopK 10%")
        if res.runs_of.get(f"{prefix}-q-a32-g32"):
            ax.axhline(acc(f"{prefix}-q-a32-g32"), color="gray", ls="--", label="uncompressed training")
        decorate(ax, "share of each sample kept (%)", "test accuracy (%)", title)
        ax.legend(fontsize=7)

    if all(res.has(f"mp-q-a{b}-g32") and res.has(f"mp-q-a32-g{b}") for b in BITS):
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        bits_lines(ax, lambda a, g: f"mp-q-a{a}-g{g}", "Model parallel: accuracy vs bits")
        ax.set_ylabel("test accuracy (%)")
        ax.legend(fontsize=8)
        save(fig, "mp_accuracy_vs_bits.png")

    if any(res.has(f"mp-topk{k}") for k in TOPK):
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        topk_lines(ax, "mp", "Model parallel: accuracy vs TopK")
        save(fig, "mp_accuracy_vs_topk.png")

    if res.runs_of.get("rn-q-a32-g32") and all(res.runs_of.get(f"rn-q-a{b}-g32") for b in BITS[:-1]):
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
        for ax, (tag, title) in zip(axes, (("q", "per-tensor min-max"), ("qc", "per sample and channel"))):
            bits_lines(ax, lambda a, g, tag=tag: "rn-q-a32-g32" if a == g == 32 else f"rn-{tag}-a{a}-g{g}",
                       f"ResNet-18/8, {title}")
        axes[0].set_ylabel("test accuracy (%), compressed inference")
        axes[0].legend(fontsize=7)
        save(fig, "rn_accuracy_vs_bits.png")

    if any(res.runs_of.get(f"rn-topk{k}") for k in TOPK):
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        topk_lines(ax, "rn", "ResNet-18/8 model parallel: accuracy vs TopK")
        save(fig, "rn_accuracy_vs_topk.png")

    curves = [c for c in RN_LOSS_CURVES if res.runs_of.get(c)]
    if curves:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for c in curves:
            runs = [res.rows[n] for n in res.runs_of[c]]
            epochs = [row["epoch"] for row in runs[0]]
            mean = [statistics.fmean(r[i]["train_loss"] for r in runs if i < len(r)) for i in range(len(epochs))]
            ax.plot(epochs, mean, "o-", lw=1, label=res.by_name[res.runs_of[c][0]].label
                    + (f" ({len(runs)} seeds)" if len(runs) > 1 else ""))
        ax.set_xticks(epochs)
        decorate(ax, "epoch", "mean training loss of the epoch", "ResNet-18/8 model parallel: training loss")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        save(fig, "rn_loss_curves.png")

    dps = [n for n, r in res.by_name.items() if r.kind == "dp" and (out / f"{n}.steps.csv").exists()]
    if dps:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for n in dps:
            rows = read_csv(out / f"{n}.steps.csv")
            if rows:
                ax.plot([r["step"] for r in rows], [r["train_loss"] for r in rows],
                        label=res.by_name[n].label, lw=1)
        ax.set_xlabel("step")
        ax.set_ylabel("train loss (mean of 20 steps)")
        ax.set_yscale("log")
        ax.set_title("Data parallel, 4 workers, Adam")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, "dp_loss_curves.png")
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the demo: a few runs, 2 epochs")
    ap.add_argument("--resnet", action="store_true",
                    help="the ResNet sweep (PyTorch, examples/torch/fashion_mnist_pipeline.py)")
    ap.add_argument("--build-dir", default=str(ROOT / "build" / "demo"))
    ap.add_argument("--out", default=None, help="results directory (default results/full, "
                                                "results/resnet or results/quick)")
    ap.add_argument("--img-dir", default=None, help="where the PNGs go (default: --out)")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--train-subset", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default=None,
                    help="comma-separated groups: quant,topk,ef,aqsgd,loco; with --resnet "
                         "rn-q,rn-qc,rn-topk,rn-ef,rn-aqsgd,rn-ddp")
    ap.add_argument("--summarize-only", action="store_true",
                    help="rebuild summary and plots from existing CSVs")
    a = ap.parse_args()

    if a.quick:
        runs = quick_runs() + quick_resnet_runs()
    else:
        runs = resnet_runs() if a.resnet else full_runs()
    if a.only:
        groups = set(a.only.split(","))
        runs = [r for r in runs if r.group in groups]
    epochs = a.epochs or (QUICK_EPOCHS if a.quick else FULL_EPOCHS)
    subset = a.train_subset if a.train_subset is not None else (
        QUICK_SUBSET if a.quick else FULL_SUBSET)
    rn_budget = (a.epochs or (RN_QUICK_EPOCHS if a.quick else RN_EPOCHS),
                 a.train_subset if a.train_subset is not None else (
                     RN_QUICK_SUBSET if a.quick else RN_SUBSET))
    budget = {"mp": (epochs, subset), "dp": (epochs, subset), "rn": rn_budget, "ddp": rn_budget}
    out = Path(a.out) if a.out else ROOT / "results" / (
        "quick" if a.quick else "resnet" if a.resnet else "full")
    out.mkdir(parents=True, exist_ok=True)
    img_dir = Path(a.img_dir) if a.img_dir else out

    t_start = time.monotonic()
    if not a.summarize_only:
        kinds = {r.kind for r in runs}
        bins = {k: [str(find_binary(a.build_dir, b))] for k, b in
                (("mp", "model_parallel"), ("dp", "data_parallel")) if k in kinds}
        bins["rn"] = [sys.executable, str(RN_SCRIPT)]
        bins["ddp"] = [sys.executable, str(DDP_SCRIPT)]
        print(f"experiments: {len(runs)} runs, {a.jobs} in parallel (DDP runs one at a time), "
              f"results in {out}", flush=True)
        failed = []
        # The DDP runs start 4 processes each: they run after the others, one at a time.
        phases = (([r for r in runs if r.kind != "ddp"], a.jobs), ([r for r in runs if r.kind == "ddp"], 1))
        done = 0
        for phase, jobs in phases:
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                futs = [pool.submit(execute, r, bins, out, budget, a.seed) for r in phase]
                for fut in concurrent.futures.as_completed(futs):
                    done += 1
                    run, rc, secs = fut.result()
                    status = "ok" if rc == 0 else f"FAILED (exit {rc}, see {run.name}.log)"
                    acc = ""
                    p = out / f"{run.name}.csv"
                    if rc == 0 and p.exists():
                        rows = read_csv(p)
                        if rows:
                            f = rows[-1]
                            acc = (f"  test acc {pct(f['test_acc'])}%" if "test_acc" in f else
                                   f"  test acc {pct(f['test_acc_compressed'])}% compressed / "
                                   f"{pct(f['test_acc_uncompressed'])}% uncompressed")
                    elapsed = time.monotonic() - t_start
                    print(f"[{done:2d}/{len(runs)}] {run.name:28s} {status} in {secs:5.1f}s{acc}  "
                          f"(elapsed {elapsed / 60:.1f} min)", flush=True)
                    if rc != 0:
                        failed.append(run.name)
        if failed:
            print(f"experiments: {len(failed)} runs failed: {', '.join(failed)}", file=sys.stderr)
    wall = time.monotonic() - t_start

    res = Results(runs, out)
    if not a.summarize_only:
        write_combined(res, out)
    text = summary(res, a.quick)
    kinds = {r.kind for r in runs}
    parts = []
    if kinds & {"mp", "dp"}:
        parts.append(f"784-512-512-256-10 MLP, {epochs} epochs, "
                     f"{'train subset ' + str(subset) if subset else 'full training set'}, seed {a.seed}")
    if "rn" in kinds:
        parts.append(f"ResNet-18 at width 8, {rn_budget[0]} epochs, train subset {rn_budget[1]}"
                     + ("" if a.quick else f", seeds {', '.join(map(str, RN_SEEDS))} where a cell "
                        "shows (n)"))
    header = ("Fashion-MNIST: " + "; ".join(parts)
              + ("" if a.summarize_only else f"; wall time {wall / 60:.1f} min with {a.jobs} "
                 f"runs in parallel on {os.cpu_count()} CPUs") + ".\n")
    (out / "summary.md").write_text(header + "\n" + text + "\n")
    written = plots(res, out, img_dir)
    print()
    print(header)
    print(text)
    print(f"summary: {out / 'summary.md'}" + "".join(f"\nplot: {p}" for p in written))
    return 1 if not a.summarize_only and len(res.rows) < len(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
