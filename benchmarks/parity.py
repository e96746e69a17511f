"""Parity of two studies of the same plan run under different settings (e.g. before and after a change of
defaults): clean and corrupted MAP@R of every run, side by side, and whether the two differ beyond the spread
over training seeds.

    python benchmarks/parity.py OLD_STUDY NEW_STUDY [--methods multi_similarity,avsl] [--labels old,new]

A study folder is what ``bgbias study`` writes (``runs/study/<bench>/``): one folder per run,
``<method>[-bgaugment]-seed<N>``, each with its test report (``eval/*-test/report.json``). For each method
without and with BGAugment the table gives each side's mean ± sample std over the training seeds both
sides have, the difference of the means, and twice its standard error (√(s₁²/n + s₂²/n)): a difference
within that is within the seed spread. The per-seed table pairs the two sides' runs of one seed (the same
initialisation and data order, so the pair differs only by the settings and what they round differently).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import statistics
import sys
from pathlib import Path

RUN_NAME = re.compile(r"^(?P<method>.+?)(?P<bgaugment>-bgaugment)?-seed(?P<seed>\d+)$")
METRICS = (("clean", lambda report: report["clean"]["map_at_r"]),
           ("corrupted", lambda report: report["corrupted"]["mean"]["map_at_r"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--methods", default=None, help="comma-separated (default: every method of both)")
    parser.add_argument("--labels", default="old,new", help="what to call the two sides")
    args = parser.parse_args()
    old_label, new_label = args.labels.split(",")
    old, new = scores(args.old), scores(args.new)
    keys = sorted(set(old) & set(new))
    if args.methods:
        keys = [key for key in keys if key[0] in args.methods.split(",")]

    print(f"command: python {shlex.join(sys.argv)}\n")
    print(f"MAP@R in %, mean ± sample std over the training seeds both sides have; "
          f"Δ = {new_label} − {old_label}.\n")
    print(f"| method | seeds | metric | {old_label} | {new_label} | Δ | 2 × SE of Δ | "
          "within the seed spread |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for method, bgaugment in sorted({key[:2] for key in keys}):
        seeds = sorted(key[2] for key in keys if key[:2] == (method, bgaugment))
        name = method + (" + BGAugment" if bgaugment else "")
        for metric, _ in METRICS:
            a = [old[(method, bgaugment, seed)][metric] for seed in seeds]
            b = [new[(method, bgaugment, seed)][metric] for seed in seeds]
            difference = statistics.mean(b) - statistics.mean(a)
            bound = 2 * math.sqrt((_std(a) ** 2 + _std(b) ** 2) / len(seeds)) if len(seeds) > 1 else math.nan
            verdict = "n/a (one seed)" if math.isnan(bound) else ("yes" if abs(difference) <= bound else "no")
            print(f"| {name} | {', '.join(map(str, seeds))} | {metric} | {_mean_std(a)} | {_mean_std(b)} | "
                  f"{difference:+.2f} | {bound:.2f} | {verdict} |")
    print(f"\nPer seed (MAP@R in %, {old_label} → {new_label}):\n")
    print("| run | clean | corrupted |")
    print("|---|---:|---:|")
    for key in keys:
        method, bgaugment, seed = key
        cells = [f"{old[key][metric]:.2f} → {new[key][metric]:.2f} "
                 f"({new[key][metric] - old[key][metric]:+.2f})" for metric, _ in METRICS]
        print(f"| {method}{' + BGAugment' if bgaugment else ''}, seed {seed} | {' | '.join(cells)} |")


def scores(study: Path) -> dict[tuple[str, bool, int], dict[str, float]]:
    """(method, bgaugment, seed) → {metric: MAP@R in %} for every run of ``study`` with a test report."""
    found = {}
    for run in sorted(path for path in study.iterdir() if path.is_dir()):
        match = RUN_NAME.match(run.name)
        reports = sorted(run.glob("eval/*-test/report.json"))
        if match is None or not reports:
            continue
        report = json.loads(reports[0].read_text(encoding="utf-8"))
        if "corrupted" not in report:
            continue
        key = (match["method"], match["bgaugment"] is not None, int(match["seed"]))
        found[key] = {metric: 100 * read(report) for metric, read in METRICS}
    return found


def _std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _mean_std(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f} ± {_std(values):.2f}"


if __name__ == "__main__":
    main()
