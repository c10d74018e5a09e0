#!/usr/bin/env python3
"""Summarises bench/ggml/compare.sh's results.tsv: medians per configuration and
same-round ratios against a reference configuration.

Each row of results.tsv is one process: round, config, vision_ms, prefill_ms, decode_ms
(all decode steps), tokens (decode steps), threads, peak_rss_kb, wall_s. End to end is
vision + prefill + decode. A ratio is a configuration's time divided by the reference's
time in the same round (above 1: slower than the reference), and the table gives the
median of those ratios over the rounds both ran in: on a shared machine the load moves
between rounds, and a ratio taken within one round cancels most of it.

When machine.tsv lies next to results.tsv (compare.sh's run writes it: round, config,
cpu, kernels), the summary first names the CPU model(s) and the table ends with each
configuration's kernel set (the decode kernels and prefill/vision products `worker bench`
reported, or the ggml build), so a table always says what ran where.

Only the standard library: it runs wherever compare.sh runs.
"""

import argparse
import csv
import os
import statistics
import sys

STAGES = [  # (key, column title, scale of the median)
    ("vision", "vision s", 1e-3),
    ("prefill", "prefill s", 1e-3),
    ("decode_tok", "decode ms/token", 1.0),
    ("e2e", "end to end s", 1e-3),
]


def read_rows(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            v, p, d = float(r["vision_ms"]), float(r["prefill_ms"]), float(r["decode_ms"])
            rows.append({
                "round": int(r["round"]),
                "config": r["config"],
                "vision": v,
                "prefill": p,
                "decode_tok": d / int(r["tokens"]),
                "e2e": v + p + d,
                "rss_gb": int(r["peak_rss_kb"]) * 1024 / 1e9,
            })
    return rows


def summarise(rows, reference):
    """Returns [(config, runs, {key: median}, {key: median ratio or None})], in the
    order the configurations first appear."""
    configs = list(dict.fromkeys(r["config"] for r in rows))
    if reference not in configs:
        raise SystemExit(f"summarize: reference {reference!r} has no rows (have {configs})")
    ref = {r["round"]: r for r in rows if r["config"] == reference}
    out = []
    for c in configs:
        mine = [r for r in rows if r["config"] == c]
        med = {k: statistics.median(r[k] for r in mine) for k, _, _ in STAGES}
        med["rss_gb"] = statistics.median(r["rss_gb"] for r in mine)
        ratios = {}
        for k, _, _ in STAGES:
            rs = [r[k] / ref[r["round"]][k] for r in mine if r["round"] in ref]
            ratios[k] = statistics.median(rs) if rs else None
        out.append((c, len(mine), med, ratios))
    return out


def read_machine(results):
    """Returns ({config: kernel sets in order}, [CPU models in order]) from machine.tsv
    next to results, or None when there is none."""
    path = os.path.join(os.path.dirname(os.path.abspath(results)), "machine.tsv")
    if not os.path.exists(path):
        return None
    kernels, cpus = {}, []
    with open(path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            ks = kernels.setdefault(r["config"], [])
            if r["kernels"] not in ks:
                ks.append(r["kernels"])
            if r["cpu"] not in cpus:
                cpus.append(r["cpu"])
    return kernels, cpus


def markdown(summary, reference, machine=None):
    head = ["configuration", "runs"] + [t for _, t, _ in STAGES] + ["peak RSS GB"]
    head += [f"{t.split()[0]} / {reference}" for _, t, _ in STAGES]
    if machine:
        head.append("kernels")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if machine:
        lines = [f"CPU: {c}" for c in machine[1]] + [""] + lines
    for c, n, med, ratios in summary:
        cells = [c, str(n)]
        for k, _, scale in STAGES:
            cells.append(f"{med[k] * scale:.1f}" if scale != 1.0 else f"{med[k]:.0f}")
        cells.append(f"{med['rss_gb']:.1f}")
        cells += [f"{ratios[k]:.2f}" if ratios[k] is not None else "-" for k, _, _ in STAGES]
        if machine:
            cells.append(" / ".join(machine[0].get(c, ["-"])))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.tsv written by compare.sh")
    ap.add_argument("--reference", required=True, help="configuration the ratios are taken against")
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args(argv)
    table = markdown(summarise(read_rows(args.results), args.reference), args.reference,
                     read_machine(args.results))
    sys.stdout.write(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main(sys.argv[1:])
