"""The dry run's cost estimate of a bench study against the wall time of the study itself.

    python benchmarks/study_cost.py                       # the estimate of a fresh quick study, here
    python benchmarks/study_cost.py --measured study.log  # ... and the wall time of a study's log

Run it from an empty folder to estimate a fresh study (nothing prepared: the pools, the bench and the runs
are all costed); ``--measured`` reads the wall time from a log of ``bgbias study`` whose lines start with
``HH:MM:SS`` (``bgbias study 2>&1 | while read -r line; do echo "$(date +%T) $line"; done``), first line to
last. Prints the cost table, the seconds it took to make it, and the ratio.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from pathlib import Path


def logged_seconds(log: Path) -> float:
    """Seconds from the first to the last ``HH:MM:SS``-stamped line of ``log`` (within one day)."""
    stamps = []
    for line in log.read_text(encoding="utf-8", errors="replace").replace("\r", "\n").splitlines():
        try:
            stamps.append(datetime.strptime(line[:8], "%H:%M:%S"))
        except ValueError:
            continue
    if len(stamps) < 2:
        raise SystemExit(f"{log}: fewer than two timestamped lines")
    return (stamps[-1] - stamps[0]).total_seconds()


def main() -> None:
    from bgbias.engine.device import resolve_device
    from bgbias.study.cost import (
        estimate_masks,
        estimate_page,
        estimate_prepare,
        estimate_runs,
        format_cost,
        split_sizes,
    )
    from bgbias.study.cost_timing import time_config
    from bgbias.study.plan import PRESETS
    from bgbias.study.spec import bench_spec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="quick", choices=sorted(PRESETS))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--measured", type=Path, help="a timestamped log of the study, to compare with")
    args = parser.parse_args()
    plan = PRESETS[args.preset]
    spec = bench_spec("small", 0.9, 0, plan.masks)
    device = str(resolve_device(args.device))
    started = time.perf_counter()
    runs = plan.runs()
    timings = []

    def timer(*args, **options):
        timings.append(time_config(*args, **options))
        return timings[-1]

    costs = estimate_runs(spec, runs, profile=plan.profile, device=device, timer=timer)
    prepare = estimate_prepare(spec, done=False, device=device)
    sizes = split_sizes(spec)
    masks = estimate_masks(spec, sum(sizes.train_classes) + sizes.val + sizes.test, device=device)
    page = estimate_page(len(runs))
    took = time.perf_counter() - started
    print(format_cost(runs, costs, prepare=prepare, masks=masks, page=page, device=device))
    for timing in timings:
        print(f"  {timing}")
    for name, cost in costs.items():
        print(f"  {name}: train {cost.train:.0f} s, measure {cost.measure:.0f} s ({cost.source})")
    estimate = prepare + masks + page + sum(cost.total for cost in costs.values())
    print(f"estimate {estimate:.0f} s, made in {took:.1f} s")
    if args.measured is not None:
        measured = logged_seconds(args.measured)
        print(f"measured {measured:.0f} s: estimate / measured = {estimate / measured:.2f}")


if __name__ == "__main__":
    main()
