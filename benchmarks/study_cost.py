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
    from bgbias.study.cost_timing import time_config
    from bgbias.study.dry_run import plan_cost
    from bgbias.study.pipeline import merged_plan
    from bgbias.study.plan import PRESETS
    from bgbias.study.runs import study_folder
    from bgbias.study.spec import bench_spec
    from bgbias.study.steps import mask_shards, page_step_id

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="quick", choices=sorted(PRESETS))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--measured", type=Path, help="a timestamped log of the study, to compare with")
    args = parser.parse_args()
    plan = PRESETS[args.preset]
    spec = bench_spec("small", 0.9, 0, plan.masks)
    folder = study_folder(Path("runs"), spec)
    fresh = merged_plan(None, folder, spec, plan, mask_shards(spec), extend=False)
    started = time.perf_counter()
    timings = []

    def timer(*args, **options):
        timings.append(time_config(*args, **options))
        return timings[-1]

    cost = plan_cost(folder, fresh, [page_step_id(plan)], device=args.device, timer=timer)
    took = time.perf_counter() - started
    print(cost.table())
    for timing in timings:
        print(f"  {timing}")
    for name, run_cost in cost.costs.items():
        print(f"  {name}: train {run_cost.train:.0f} s, measure {run_cost.measure:.0f} s")
    print(f"estimate {cost.total:.0f} s, made in {took:.1f} s")
    if args.measured is not None:
        measured = logged_seconds(args.measured)
        print(f"measured {measured:.0f} s: estimate / measured = {cost.total / measured:.2f}")


if __name__ == "__main__":
    main()
