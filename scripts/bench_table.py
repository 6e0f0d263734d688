#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
"""Prints the ratio table of commpress_roofline_bench from its Google Benchmark JSON.

Every benchmark times a kernel and its baselines interleaved and reports the median ns per
element of each as counters `<name>_ns`; its label lists the goals as ratios of those counters,
separated by ';', e.g. `kernel/copy<=0.80` or `nth_element/kernel>=15`. Rows whose names end in
`/seed:N` are merged: each ratio is the median over the seeds (std::nth_element's time depends
on the data; bench/README.md, "Noise on these VMs").

    python3 scripts/bench_table.py roofline.json [more.json ...] [--markdown]

A benchmark in a later file replaces the one of the same name in an earlier file (rerun rows).

`floor/base` is the row's floor over the baseline of its first kernel goal (the copy, or the
nearest-rounding kernel for a stochastic row): a goal below it cannot be met on this machine.
For memory-bound rows the floor is the traffic the kernel must move, streamed with nothing
computed (`floor_ref` in the benchmark), i.e. the memory roofline; for stochastic rows it is
the Philox words alone (`random_words_ref`), the compute the kernel cannot avoid.

Exit status 0 always: the table is a report, not a gate (the 2-vCPU VM is too noisy to gate on;
bench/README.md, "Noise on these VMs").
"""

import json
import re
import statistics
import sys

GOAL = re.compile(r"^\s*([A-Za-z_]+)/([A-Za-z_]+)\s*(<=|>=)\s*([0-9.]+)\s*$")


def load(paths):
    """Benchmarks of all files; a benchmark in a later file replaces one of the same name."""
    benches, context = {}, {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        context.update(doc.get("context", {}))
        for b in doc["benchmarks"]:
            if b.get("run_type", "iteration") == "iteration":
                benches.pop(b["name"], None)
                benches[b["name"]] = b
    order = {}
    for b in benches.values():  # keep the rows in the order of their first benchmark
        order.setdefault(re.sub(r"/seed:\d+.*$", "", b["name"]), len(order))
    return sorted(benches.values(),
                  key=lambda b: order[re.sub(r"/seed:\d+.*$", "", b["name"])]), context


def rows_of(benches):
    """Groups benchmarks by name without the /seed:N suffix, keeping order of first appearance."""
    groups = {}
    for b in benches:
        key = re.sub(r"/seed:\d+$", "", b["name"].split("/iterations:")[0].split("/manual_time")[0])
        groups.setdefault(key, []).append(b)
    return groups


def evaluate(group):
    label = group[0].get("label", "")
    kernel = statistics.median(b["kernel_ns"] for b in group)
    copy = statistics.median(b["copy_ns"] for b in group if "copy_ns" in b) \
        if any("copy_ns" in b for b in group) else None
    checks = []
    for clause in filter(None, label.split(";")):
        m = GOAL.match(clause)
        if not m:
            continue
        num, den, op, goal = m.group(1), m.group(2), m.group(3), float(m.group(4))
        ratio = statistics.median(b[num + "_ns"] / b[den + "_ns"] for b in group)
        ok = ratio <= goal if op == "<=" else ratio >= goal
        checks.append((f"{num}/{den}", ratio, f"{op} {goal:g}", ok))
    return kernel, copy, checks


def floor_base(group):
    """The baseline of the row's first `kernel/<base>` goal; the copy when it has none."""
    for clause in filter(None, group[0].get("label", "").split(";")):
        m = GOAL.match(clause)
        if m and m.group(1) == "kernel":
            return m.group(2)
    return "copy"


def main(argv):
    markdown = "--markdown" in argv
    paths = [a for a in argv if not a.startswith("--")]
    if not paths:
        print(__doc__)
        return 0
    benches, context = load(paths)
    print(f"# host {context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs, "
          f"{context.get('mhz_per_cpu', '?')} MHz; {context.get('page_policy', '?')}; "
          f"n = {context.get('elements', '?')}")
    header = ["operation", "kernel ns/elt", "copy ns/elt", "floor/base", "ratio", "measured",
              "goal", "pass"]
    lines = []
    for name, group in rows_of(benches).items():
        kernel, copy, checks = evaluate(group)
        base = floor_base(group)
        floor = statistics.median(b["floor_ns"] / b[base + "_ns"] for b in group) \
            if all("floor_ns" in b and base + "_ns" in b for b in group) else None
        seeds = f" (median of {len(group)} seeds)" if len(group) > 1 else ""
        for i, (what, ratio, goal, ok) in enumerate(checks or [("-", float("nan"), "-", True)]):
            lines.append([name + seeds if i == 0 else "", f"{kernel:.3f}" if i == 0 else "",
                          f"{copy:.3f}" if (copy is not None and i == 0) else "",
                          f"{floor:.2f}" if (floor is not None and i == 0) else "", what,
                          f"{ratio:.2f}", goal, "PASS" if ok else "FAIL"])
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(header)]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        for l in lines:
            print("  ".join(c.ljust(w) for c, w in zip(l, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
