"""The leakage meter calibrated on the bias dial (issue 34; docs/leakage.md, "Calibration on the bias
dial").

For each ρ of the dial (and 0.25, 0.75 between), the bench the dial builds (preset small, seed 0; built
here, or reused where its folder already holds it, :func:`~bgbias.study.bench.built_bench`) and its exact
masks laid out where the dial's exact-mask study reads them (or u2netp's, ``--masks u2netp``); then the meter
on its split with each fill and the default encoder (the offline ImageNet MobileNetV2). Prints the table (ρ,
fill, headline leakage with its 95 % interval, background-only MAP@R beside chance, both probes beside
chance), each fill's leakage at ρ = 0 and its range over ρ, the correlation of leakage with
the dial's trained drop at the dial's four ρ, and how long each step took; writes every meter's
``leakage.json`` / ``leakage.md`` under ``--out``, ``calibration.json`` there, the plot, and the curves the
meter inverts for a dataset's bench ρ into ``bgbias/configs/leakage_dial.json``
(:mod:`bgbias.leakage_meter.calibration`).

    python benchmarks/leakage_dial.py     # in the folder where the dial ran (./data, ./masks, ./runs)

The trained drop is the vanilla multi-similarity run's relative drop with exact masks, read from the dial's
records (``runs/study/dial-multi_similarity-bench-small-seed0/dial.json``) where they are on this machine,
else from the dial's results record in the docs (``docs/data/dial/dial.json``: docs/results.md's dial).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bgbias.api import as_embedding_model
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.figures import new_figure, save_png
from bgbias.fileio import write_json_atomic
from bgbias.leakage_meter.calibration import CALIBRATION_FILE, CALIBRATION_FORMAT
from bgbias.leakage_meter.meter import DEFAULT_ENCODER, measure_leakage
from bgbias.report.dial import MASK_LABELS
from bgbias.saliency.ground_truth import copy_ground_truth_masks
from bgbias.saliency.pipeline import make_masks
from bgbias.schema import format_header
from bgbias.study.bench import built_bench, prepare_bench
from bgbias.study.dial import DIAL_RHOS
from bgbias.study.spec import bench_spec
from bgbias.variants.variants import FILLS

CURVE_RHOS = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)
"""The ρ the meter is measured at: the dial's four, and two more so the curve inverted for a dataset's bench ρ
(:mod:`bgbias.leakage_meter.calibration`) has no long straight stretch."""
PRESET, SEED = "small", 0
"""The dial's bench settings (``bgbias study --dial``'s defaults)."""
DIAL_RECORD = Path("runs/study/dial-multi_similarity-bench-small-seed0/dial.json")
DOCS_DIAL = Path(__file__).resolve().parents[1] / "docs" / "data" / "dial" / "dial.json"
"""The dial's results record that docs/results.md ("The bias dial") shows."""
DOCS_MASKS = {"ground-truth": "exact", "u2netp": "u2netp"}
"""How that record names the mask sources."""


def prepared_bench(rho: float, source: str, split: str, device: str,
                   seed: int = SEED) -> tuple[Any, Path, dict[str, float]]:
    """The dial's bench at ``rho`` (built unless its folder already holds it) and the folder of its masks from
    ``source`` (the exact ones laid out, or u2netp's made for ``split``'s images where the dial's U²-Net study
    reads them, resumably), with the seconds each step took."""
    spec = bench_spec(PRESET, rho, seed, source)
    root, masks = Path(spec.root), Path(spec.masks_dir)
    seconds = {}
    start = time.perf_counter()
    if built_bench(root, preset=PRESET, rho=rho, seed=seed) is None:
        prepare_bench(root, preset=PRESET, rho=rho, seed=seed)
    seconds["bench"] = time.perf_counter() - start
    dataset = open_dataset("bench", root)
    start = time.perf_counter()
    if source == "ground-truth":
        copy_ground_truth_masks(dataset.items(), masks)
    else:
        make_masks(split_items(dataset, split), masks, model=source, device=device)
    seconds["masks"] = time.perf_counter() - start
    return dataset, masks, seconds


def dial_drops(source: str, record: Path = DIAL_RECORD) -> tuple[dict[float, float], str]:
    """The vanilla drop (%) with masks from ``source`` per ρ (the mean over seeds) and where it came from:
    the dial's ``record`` (:func:`bgbias.report.dial.dial_table`'s cells), else the docs."""
    if not record.is_file():
        return recorded_drops(source), f"{DOCS_DIAL.relative_to(DOCS_DIAL.parents[3])} (no dial records here)"
    table = json.loads(record.read_text(encoding="utf-8"))
    column = {name: i for i, name in enumerate(table["columns"])}
    drops = {}
    for row in table["rows"]:
        drop = row[column["relative drop (%)"]]
        if row[column["masks"]] == MASK_LABELS[source] and "BGAugment" not in row[column["run"]] and drop:
            drops[float(row[column["ρ"]])] = float(drop.split()[0])
    return drops, str(record)


def recorded_drops(source: str) -> dict[float, float]:
    """The vanilla drop (%) with masks from ``source`` per ρ, as the docs' dial record holds it."""
    table = json.loads(DOCS_DIAL.read_text(encoding="utf-8"))["tables"]["dial"]
    column = {name: i for i, name in enumerate(table["columns"])}
    return {float(row[column["ρ"]]): float(row[column["relative drop"]].rstrip(" %").replace("−", "-"))
            for row in table["rows"]
            if row[column["masks"]] == DOCS_MASKS[source] and not row[column["run"]].endswith("+ BGAugment")}


def correlations(x: list[float], y: list[float]) -> dict[str, float]:
    """Pearson's and Spearman's correlation of ``x`` and ``y``."""
    from scipy.stats import pearsonr, spearmanr

    return {"pearson": float(pearsonr(x, y).statistic), "spearman": float(spearmanr(x, y).statistic)}


def plot(rows: list[dict[str, Any]], drops: dict[float, float], path: Path, masks: str,
         text: dict[str, str] | None = None) -> None:
    """Leakage against ρ (with its interval) and against the dial's trained drop, one line per fill; ``text``
    goes into the PNG (what the docs drew it from)."""
    figure = new_figure(10, 4)
    by_rho, by_drop = figure.subplots(1, 2)
    for fill in sorted({row["fill"] for row in rows}, key=FILLS.index):
        line = sorted((row for row in rows if row["fill"] == fill), key=lambda row: row["rho"])
        rhos = [row["rho"] for row in line]
        values = np.array([100 * row["leakage"] for row in line])
        errors = np.array([[value - 100 * row["interval"][0], 100 * row["interval"][1] - value]
                           for value, row in zip(values, line, strict=True)]).T
        by_rho.errorbar(rhos, values, yerr=errors, marker="o", capsize=3, label=fill)
        on_dial = [(drops[row["rho"]], 100 * row["leakage"]) for row in line if row["rho"] in drops]
        by_drop.plot(*zip(*on_dial, strict=True), marker="o", label=fill)
    for rho in sorted({row["rho"] for row in rows} & set(drops)):
        top = max(100 * row["leakage"] for row in rows if row["rho"] == rho)
        by_drop.annotate(f"ρ = {rho:g}", (drops[rho], top), fontsize=8, textcoords="offset points",
                         xytext=(-12, 8))
    by_rho.set(xlabel="ρ (bench's background–class correlation)", ylabel="background leakage (%)",
               title=f"leakage on the dial's benches ({masks})")
    by_drop.set(xlabel=f"trained drop (%): multi-similarity, {masks}", ylabel="background leakage (%)",
                title="leakage against the trained model's drop")
    for axes in (by_rho, by_drop):
        axes.axhline(0, color="grey", linewidth=0.8)
        axes.grid(alpha=0.3)
        axes.legend(title="fill")
    save_png(figure, path, text)


def pct(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rhos", type=float, nargs="+", default=list(CURVE_RHOS))
    parser.add_argument("--fills", nargs="+", choices=FILLS, default=list(FILLS))
    parser.add_argument("--split", default="test")
    parser.add_argument("--bench-seed", type=int, default=SEED,
                        help="build the benches with another seed (then no plot and no curves are written: "
                             "they are the dial's)")
    parser.add_argument("--masks", choices=("ground-truth", "u2netp"), default="ground-truth")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=None, help="default runs/leakage-dial/<masks>")
    parser.add_argument("--calibration", type=Path, default=CALIBRATION_FILE,
                        help="where the curves go (default the one the meter reads); 'none' writes none")
    parser.add_argument("--plot", type=Path, default=None,
                        help="default docs/images/leakage-dial.png (exact masks), leakage-dial-u2netp.png")
    args = parser.parse_args()
    args.out = args.out or Path("runs/leakage-dial") / (
        args.masks if args.bench_seed == SEED else f"{args.masks}-bench-seed{args.bench_seed}")
    args.plot = args.plot or Path("docs/images") / ("leakage-dial.png" if args.masks == "ground-truth"
                                                     else f"leakage-dial-{args.masks}.png")

    encoder = as_embedding_model(DEFAULT_ENCODER, device=args.device)
    rows, timings = [], []
    for rho in args.rhos:
        dataset, masks, seconds = prepared_bench(rho, args.masks, args.split, args.device, args.bench_seed)
        timings.append(f"rho {rho:g}: bench {seconds['bench']:.1f} s, {args.masks} masks "
                       f"{seconds['masks']:.1f} s")
        print(timings[-1], file=sys.stderr, flush=True)
        for fill in args.fills:
            start = time.perf_counter()
            result = measure_leakage(dataset, encoder, split=args.split, masks_dir=masks, fill=fill,
                                     out=args.out / f"rho{rho:g}-{fill}")
            seconds = time.perf_counter() - start
            timings.append(f"rho {rho:g}, {fill}: meter {seconds:.1f} s ({result.images} images)")
            rows.append({"rho": rho, "fill": fill, "encoder": result.model, "leakage": result.leakage,
                         "interval": list(result.interval), "background": vars(result.background),
                         "foreground": vars(result.foreground), "chance": vars(result.chance),
                         "seconds": seconds})
            print(timings[-1], file=sys.stderr, flush=True)

    print("| ρ | fill | leakage [95 % CI] | bg MAP@R | chance MAP@R | fg MAP@R | bg probe | fg probe | "
          "chance probe |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        low, high = row["interval"]
        bg, fg, chance = row["background"], row["foreground"], row["chance"]
        print(f"| {row['rho']:g} | {row['fill']} | {pct(row['leakage'])} [{pct(low)}, {pct(high)}] | "
              f"{pct(bg['map_at_r'])} | {pct(chance['map_at_r'])} | {pct(fg['map_at_r'])} | "
              f"{pct(bg['probe_accuracy'])} | {pct(fg['probe_accuracy'])} | "
              f"{pct(chance['probe_accuracy'])} |")

    drops, source = dial_drops(args.masks)
    summary = {}
    for fill in args.fills:
        line = {row["rho"]: row for row in rows if row["fill"] == fill}
        leakage = [line[rho]["leakage"] for rho in args.rhos]
        dial = [rho for rho in args.rhos if rho in DIAL_RHOS]
        summary[fill] = {
            "at_rho0": line[min(args.rhos)]["leakage"], "interval_at_rho0": line[min(args.rhos)]["interval"],
            "spread": max(leakage) - min(leakage),
            "monotone": all(b >= a for a, b in itertools.pairwise(leakage)),
            **({"vs_drop": correlations([line[rho]["leakage"] for rho in dial], [drops[rho] for rho in dial])}
               if len(dial) > 2 and all(rho in drops for rho in dial) else {}),
        }
        print(f"{fill}: leakage at ρ {min(args.rhos):g} {pct(summary[fill]['at_rho0'])} %, range over ρ "
              f"{pct(summary[fill]['spread'])} points, monotone {summary[fill]['monotone']}, "
              f"against the drop {summary[fill].get('vs_drop')}")
    print(f"trained drops from {source}: {drops}")
    print("\n".join(timings))

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration.json").write_text(json.dumps({
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.platform(),
        "encoder": DEFAULT_ENCODER, "split": args.split, "masks": args.masks, "rows": rows,
        "summary": summary,
        "drops": {f"{rho:g}": drop for rho, drop in drops.items()}, "drops_from": source,
    }, indent=2), encoding="utf-8")
    if args.bench_seed != SEED:
        return
    if all(rho in drops for rho in args.rhos if rho in DIAL_RHOS):
        plot(rows, drops, args.plot, MASK_LABELS[args.masks])
    if str(args.calibration) != "none":
        write_calibration(args.calibration, rows, args.masks, " ".join(sys.argv[1:]))


def write_calibration(path: Path, rows: list[dict[str, Any]], masks: str, arguments: str) -> None:
    """The meter's leakage at each ρ as one curve per (encoder, fill), with ``masks``, into ``path``; the
    curves the file already holds for other masks, encoders or fills are kept."""
    kept = []
    if path.is_file():
        record = json.loads(path.read_text(encoding="utf-8"))
        kept = [curve for curve in record.get("curves", []) if curve["masks"] != masks]
    curves = []
    ordered = sorted(rows, key=lambda row: (row["encoder"], row["fill"], row["rho"]))
    for (encoder, fill), group in itertools.groupby(ordered, key=lambda row: (row["encoder"], row["fill"])):
        line = list(group)
        curves.append({"encoder": encoder, "fill": fill, "masks": masks,
                       "rhos": [row["rho"] for row in line], "leakage": [row["leakage"] for row in line],
                       "intervals": [row["interval"] for row in line],
                       "command": f"python benchmarks/leakage_dial.py {arguments}".strip(),
                       "date": datetime.now(UTC).date().isoformat(), "machine": platform.platform()})
    write_json_atomic(path, {
        **format_header(CALIBRATION_FORMAT), "bench": {"preset": PRESET, "seed": SEED, "split": "test"},
        "curves": sorted(kept + curves, key=lambda c: (c["masks"], c["encoder"], c["fill"])),
    })


if __name__ == "__main__":
    main()
