"""What ``bgbias study``'s scheduling costs, and what a second worker buys on this machine.

    python benchmarks/study_scheduling.py overhead [--runs 96] [--workers 1]
    python benchmarks/study_scheduling.py workers [--workers 1 2] [--keep DIR]

``overhead``: a plan of ``--runs`` run steps (plus prepare and page) worked through by ``--workers`` worker
threads whose steps do nothing: the seconds per step are the plan's own cost (claim, renewal thread, record,
each a read and an atomic write of plan.json under its lock). ``workers``: the quick preset (``bgbias study``,
the README's first command) from an empty folder, once per worker count, each in a fresh folder (bench, pools
and runs made anew; the assets come from the cache), its wall time and each step's time from its plan.json,
after the dry run's estimate of it made in the same folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def overhead(runs: int, workers: int) -> None:
    from bgbias.methods.registry import method_names
    from bgbias.study import worker as worker_module
    from bgbias.study.pipeline import plan_study
    from bgbias.study.plan import study_plan
    from bgbias.study.spec import bench_spec

    methods = method_names()
    seeds = max(1, runs // (2 * len(methods)))
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        spec = bench_spec("small", 0.9, 0, "ground-truth", backgrounds=folder / "pools")
        plan = study_plan("full", methods=methods, seeds=seeds, masks="ground-truth")
        goals = plan_study(folder, spec, plan)
        worker_module.execute_step = lambda *args: {}
        started = time.perf_counter()
        threads = [threading.Thread(target=worker_module.work, args=(folder, goals),
                                    kwargs={"log": lambda _: None}) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        steps = len(json.loads((folder / "plan.json").read_text())["steps"])
    print(f"{steps} steps ({2 * len(methods) * seeds} runs), {workers} worker(s): {seconds:.2f} s, "
          f"{1000 * seconds / steps:.1f} ms per step")


def quick_preset(workers: list[int], keep: Path | None) -> None:
    for count in workers:
        folder = Path(tempfile.mkdtemp(prefix=f"quick-{count}w-", dir=keep))
        command = [sys.executable, "-m", "bgbias", "study", "--workers", str(count)]
        estimate = subprocess.run([*command, "--dry-run"], cwd=folder, capture_output=True, text=True,
                                  check=False).stdout
        total = next((line for line in estimate.splitlines() if line.startswith("total")), "total ?")
        print(f"--workers {count}: the dry run's estimate (device time, made first): "
              f"{total.split(None, 2)[2]}")
        started = time.perf_counter()
        done = subprocess.run(command, cwd=folder, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=False)
        seconds = time.perf_counter() - started
        (plan_path,) = folder.glob("runs/study/*/plan.json")
        steps = json.loads(plan_path.read_text())["steps"]
        times = ", ".join(f"{name} {step['finished'] - step['started']:.0f} s" for name, step in steps.items()
                          if step["finished"] and step["started"])
        print(f"--workers {count}: exit {done.returncode}, {seconds:.0f} s ({seconds / 60:.1f} min); {times}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    kinds = parser.add_subparsers(dest="kind", required=True)
    cost = kinds.add_parser("overhead")
    cost.add_argument("--runs", type=int, default=96)
    cost.add_argument("--workers", type=int, default=1)
    wall = kinds.add_parser("workers")
    wall.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    wall.add_argument("--keep", type=Path, default=None, help="make the study folders here, and keep them")
    options = parser.parse_args()
    print(f"command: python benchmarks/study_scheduling.py {' '.join(sys.argv[1:])}")
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if options.kind == "overhead":
        overhead(options.runs, options.workers)
    else:
        quick_preset(options.workers, options.keep)


if __name__ == "__main__":
    main()
