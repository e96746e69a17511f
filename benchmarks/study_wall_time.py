"""The wall time a study's runs took, from what the runs leave behind: per run, its training (the active spans
of ``train.log``, so time between a kill and the resume is not counted) and its evaluation (from the end of
training to the last embedding cached under ``eval/cache/``, which a resumed evaluation does not rewrite).

    python benchmarks/study_wall_time.py runs/study/bench-small-rho0.9-seed0-u2netp

Prints one line per run and the totals per method and overall. The attribution step is not in these figures:
a resumed study rewrites its report files, so their times are not when it ran; time it apart (about a minute
per run for SmoothGrad on 200 bench images on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import statistics
from datetime import datetime
from pathlib import Path

STARTS = (" run ", " resuming ")
"""A train.log line with one of these words opens a process's span: the gap before it is not counted."""


def _stamp(line: str) -> datetime:
    return datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")


def training_seconds(log: Path) -> tuple[float, datetime]:
    """Seconds of training in ``log`` (gaps before a (re)start left out) and the time of its last line."""
    total, previous = 0.0, None
    for line in log.read_text().splitlines():
        if len(line) < 19 or not line[:4].isdigit():
            continue
        now = _stamp(line)
        if previous is not None and not any(word in line[19:30] for word in STARTS):
            total += (now - previous).total_seconds()
        previous = now
    if previous is None:
        raise SystemExit(f"{log}: no timestamped line")
    return total, previous


def evaluation_seconds(run: Path, trained: datetime) -> float | None:
    """Seconds from the end of training to the last cached embedding, or None without a cache."""
    cached = [path.stat().st_mtime for path in (run / "eval" / "cache").glob("*.npz")]
    return max(cached) - trained.timestamp() if cached else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path, help="a study folder: one sub-folder per run")
    args = parser.parse_args()
    per_method: dict[str, list[float]] = {}
    total = 0.0
    for run in sorted(path for path in args.study.iterdir() if (path / "train.log").is_file()
                      and not path.is_symlink()):
        train, trained = training_seconds(run / "train.log")
        evaluate = evaluation_seconds(run, trained)
        seconds = train + (evaluate or 0.0)
        total += seconds
        method = run.name.rsplit("-seed", 1)[0]
        per_method.setdefault(method, []).append(seconds)
        print(f"{run.name:40s} train {train / 60:5.1f} min  eval "
              f"{'-' if evaluate is None else f'{evaluate / 60:5.1f} min'}")
    print()
    for method, times in per_method.items():
        print(f"{method:40s} {len(times)} runs, median {statistics.median(times) / 60:5.1f} min")
    print(f"\n{sum(map(len, per_method.values()))} runs, train + eval {total / 3600:.2f} h")


if __name__ == "__main__":
    main()
