"""The commands that put runs together: ``report`` (a table of evaluated runs) and ``study`` (the whole
measurement on the bench, and the bias dial)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bgbias.cli.options import DATASETS, PATH_DIR, bench_options, given_options
from bgbias.errors import EXIT_PARTIAL, BgbiasError, OptionError
from bgbias.options import EXPLAIN_IMAGES

if TYPE_CHECKING:
    from bgbias.study.local import Slot
    from bgbias.study.plan import StudyPlan


@click.command("report")
@click.argument("run_dirs", nargs=-1, type=PATH_DIR, metavar="RUN...")
@click.option("--split", type=click.Choice(["test", "val", "all"]), default="test", show_default=True)
@click.option("--out", type=PATH_DIR, default=None,
              help="Folder for table.md/.csv/.json and runs.png (default <runs>/report), replaced whole once "
                   "the report is written: a folder of its own.")
@click.option("--runs", type=PATH_DIR, default=None,
              help="Without RUN arguments, every evaluated run in this folder and every external model in "
                   "its external/ (default ./runs).")
@click.option("--attribution", "attribution_label", default="smoothgrad", show_default=True,
              help="Whose maps the galleries compare across runs: an attribution label, the end of the "
                   "explain folders' names (e.g. smoothgrad-copies50).")
@click.option("--study", "study_page", is_flag=True,
              help="Runs of several training seeds (e.g. a study on CUB made with bgbias train / eval / "
                   "explain): Table 1 of seed 0, seeds.md, and the study page study.md / study.html.")
@click.option("--title", default=None, help="The study page's title (with --study).")
def report(run_dirs: tuple[Path, ...], split: str, out: Path | None, runs: Path | None,
           attribution_label: str, study_page: bool, title: str | None) -> None:
    """Several evaluated runs in one Table-1-style table: method × clean / corrupted, with and without
    BGAugment, plus foreground scores (one column per attribution) where `bgbias explain` ran. A RUN may also
    be the folder of a model scored with `bgbias eval --model` (one row of its own)."""
    from bgbias.engine.model_folders import evaluated_folders
    from bgbias.paths import runs_root
    from bgbias.report.markdown import table as markdown_table
    from bgbias.report.runs_table import profile_table, report_runs, table_one

    runs = runs if runs is not None else runs_root()
    if not run_dirs:
        run_dirs = tuple(evaluated_folders(runs, split))
        if not run_dirs:
            raise OptionError(f"no run in {runs} has an evaluation report for the {split} split",
                              fix="evaluate runs with `bgbias eval --corrupted`, or name run folders")
    out = out if out is not None else runs / "report"
    if study_page:
        from bgbias.study.page import report_study

        title = title or f"bgbias study of {len(run_dirs)} runs"
        files = report_study(run_dirs, out, title=title, split=split)
        click.echo(files["study_md"].read_text(encoding="utf-8"))
        click.echo(f"report: {files['study_html']} (one page, pictures included) and {files['study_md']}")
        return
    written = report_runs(run_dirs, out, split, attribution_label)
    click.echo(markdown_table(*table_one(written.reports, written.foreground)))
    profile = profile_table(written.reports)
    if profile[1]:
        click.echo(f"\nbackground-reliance profile (MAP@R, %):\n{markdown_table(*profile)}")
    click.echo(f"\ntable: {written.files['table_md']}; plot: {written.files['runs_png']}")
    for gallery in written.galleries:
        click.echo(f"attribution maps side by side: {gallery}")


@click.command(
    "study",
    epilog=f"Exit status: 0 when every run was trained and measured; 2 on an error, shown with its fix; "
    f"{EXIT_PARTIAL} when some runs failed: the study went on with the others, the page leaves the failed "
    "ones out and names them, and `bgbias study --status` shows each error (the study folder's plan.json "
    "keeps its traceback; the next `bgbias study` tries them again).",
)
@click.option("--dataset", "dataset_name", type=click.Choice(DATASETS), default="bench", show_default=True,
              help="The bench (built by the study) or a real dataset at --root.")
@click.option("--root", type=PATH_DIR, default=None, help="The dataset's folder (default: its usual place).")
@click.option("--preset", type=click.Choice(["quick", "full"]), default="quick", show_default=True,
              help="quick: multi-similarity, one training seed (on the bench, exact masks: within 15 minutes "
                   "on 2 CPU cores); full: the paper's six baselines and DCML, SAM, MetricFormer and AVSL, "
                   "three seeds, U²-Net masks, every run's profile (hours; resumable).")
@click.option("--methods", default=None,
              help="Comma-separated methods instead of the preset's (see `bgbias methods`).")
@click.option("--seeds", type=click.IntRange(min=1), default=None,
              help="Training seeds 0 … N−1 instead of the preset's.")
@click.option("--masks", "masks", default=None,
              help="u2netp (default on a real dataset), u2net (the paper's), ground-truth (the bench's exact "
                   "masks) or a folder of masks made before (`bgbias masks`).")
@click.option("--compare-masks", "compare_masks", default=None,
              help="A second mask source, named as --masks names one (made in the masks steps where it is "
                   "a U²-Net model): each run's corrupted repeats are cut out again with it, and its report "
                   "and the page give the corrupted score with each masks, their difference with its "
                   "interval and the masks' IoU.")
@click.option("--backgrounds", type=PATH_DIR, default=None,
              help="Background pools (train/ and test/) instead of ./backgrounds.")
@click.option("--dial", is_flag=True,
              help="The bias dial instead: one method (--methods, default multi_similarity) without and with "
                   "BGAugment on the bench rebuilt at rho 0, 0.5, 0.9 and 1, with exact and U²-Net masks "
                   "(--masks: one of them), and the drop plotted against rho.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="A setting for every run of the plan, as `bgbias train --set` (e.g. schedule.epochs=2, "
                   "model.backbone=resnet50, loss.certainty_min=global; repeatable). The variant's runs and "
                   "page get folders of their own.")
@click.option("--explain-images", type=click.IntRange(min=1), default=EXPLAIN_IMAGES, show_default=True,
              help="Test images of each run whose foreground scores are computed (SmoothGrad, 25 passes "
                   "each).")
@bench_options("bench-")
@click.option("--out", type=PATH_DIR, default=None,
              help="The study folder: its plan, runs and page (default runs/study/<dataset and masks>).")
@click.option("--extend", is_flag=True,
              help="Add what this command asks for to the folder's plan: other methods, more seeds, a "
                   "profile, a second mask source (--compare-masks: the runs are measured again, not "
                   "trained).")
@click.option("--executor", type=click.Choice(["local", "slurm"]), default="local", show_default=True,
              help="local: workers on this machine; slurm: one job-array task per step, through submitit.")
@click.option("--devices", default="auto", show_default=True,
              help="auto (every GPU, else the CPU), cpu, or GPUs as cuda:0,cuda:1,…: one worker each.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="CPU workers (default 1), the cores split between them.")
@click.option("--gpus-per-run", type=click.IntRange(min=1), default=1, show_default=True,
              help="Devices per run: each run trains under torchrun on this many.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads of each run (default: the cores split between the workers). Runs give the "
                   "same bits under any number of workers only with the same --threads.")
# The --slurm-* options, by the names of bgbias.study.slurm.slurm_options's arguments:
@click.option("--slurm-partition", "partition", default=None, help="SLURM partition of the job arrays.")
@click.option("--slurm-time", "time", default=None,
              help="Time limit of each task: minutes or HH:MM:SS (default 24 h; a task that reaches it is "
                   "requeued and its run resumes).")
@click.option("--slurm-gpus-per-task", "gpus_per_task", default=None, help="GPUs of each task (default 1).")
@click.option("--slurm-cpus-per-task", "cpus_per_task", default=None, help="CPU cores of each task.")
@click.option("--slurm-array-parallelism", "array_parallelism", default=None,
              help="Tasks of an array running at once.")
@click.option("--slurm-opt", "opts", multiple=True, metavar="KEY=VALUE",
              help="Another submitit SLURM parameter, e.g. --slurm-opt mem=64G (repeatable).")
@click.option("--dry-run", is_flag=True,
              help="Print the plan, what is done and what the rest costs (device-hours, from timing a few "
                   "steps here; CUB, Cars196 or SOP not downloaded yet: from its known size); with "
                   "--executor slurm, the submission. Trains nothing.")
@click.option("--status", "show_status", is_flag=True,
              help="Print every step of the study folder's plan: state, device, host, progress, time, "
                   "errors (readable while workers run).")
@click.pass_context
def study(ctx: click.Context, dataset_name: str, root: Path | None, preset: str, methods: str | None,
          seeds: int | None, masks: str | None, compare_masks: str | None, backgrounds: Path | None,
          dial: bool,
          settings: tuple[str, ...], explain_images: int, bench_preset: str, rho: float, bench_seed: int,
          out: Path | None, extend: bool, executor: str, devices: str, workers: int | None, gpus_per_run: int,
          threads: int | None, dry_run: bool, show_status: bool, **slurm: Any) -> None:
    """The paper's measurement as one command, from nothing to one report page: the bench (or a dataset's
    check), the masks, every planned run trained without and with BGAugment, clean vs corrupted MAP@R,
    foreground scores, and study.md / a self-contained study.html with the spread over training seeds. The
    study folder keeps the plan; the same command resumes it, and several processes (or machines sharing
    the folder) work on one plan together."""
    from bgbias.paths import runs_root
    from bgbias.study.local import local_slots
    from bgbias.study.pipeline import run_study, submit_study_to_slurm
    from bgbias.study.plan import MASK_SOURCES, study_plan
    from bgbias.study.runs import study_folder
    from bgbias.study.slurm import slurm_options
    from bgbias.study.spec import study_spec
    from bgbias.study.status import read_status

    chosen = [name.strip() for name in methods.split(",") if name.strip()] if methods else None
    plan = study_plan(preset, chosen, seeds, masks if masks in MASK_SOURCES else None, settings,
                      dataset=dataset_name, explain_images=explain_images)
    if dial:
        slots = local_slots(devices, workers, gpus_per_run, threads) if executor == "local" else None
        _dial(ctx, plan, masks, seeds, bench_preset, bench_seed, slots)
        return
    spec = study_spec(dataset_name, root, plan.masks if masks is None and dataset_name == "bench" else masks,
                      backgrounds, bench=(bench_preset, rho, bench_seed), compare_masks=compare_masks,
                      dry_run=dry_run)
    folder = out if out is not None else study_folder(runs_root(), spec)
    if show_status:
        click.echo(read_status(folder))
        return
    slurm_settings = slurm_options(**slurm) if executor == "slurm" else None
    if dry_run:
        from bgbias.study.dry_run import describe_dry_run

        click.echo(describe_dry_run(folder, spec, plan, extend=extend, slurm=slurm_settings))
        return
    if slurm_settings is not None:
        click.echo(submit_study_to_slurm(folder, spec, plan, slurm_settings, extend=extend))
        return
    slots = local_slots(devices, workers, gpus_per_run, threads)  # devices checked before the plan is written
    result = run_study(folder, spec, plan, slots=slots, extend=extend, log=click.echo)
    if not result.report:
        if result.runs:
            why = result.page_error or "its step is not done"
            raise BgbiasError(f"the study's page was not written: {why}",
                              path=folder, fix="see `bgbias study --status` (same options), then run the "
                                               "command again")
        raise _nothing_measured(result.failures)
    for name in ("table_md", "seeds_md"):
        click.echo("\n" + result.report[name].read_text(encoding="utf-8"))
    click.echo(f"report: {result.report['study_html']} (one page, pictures included) and "
               f"{result.report['study_md']}; per-run reports, plots and galleries in each run's eval/ and "
               f"explain/ folders; `bgbias study --status` (same options) lists every step")
    _exit_partial_on(result.failures)


def _dial(ctx: click.Context, plan: StudyPlan, masks: str | None, seeds: int | None, bench_preset: str,
          bench_seed: int, slots: list[Slot] | None) -> None:
    from bgbias.study.dial import DIAL_MASKS, run_dial

    given = given_options(ctx, ("dataset_name", "root", "compare_masks", "backgrounds", "settings", "rho",
                                "out", "dry_run", "show_status"))
    if given:
        raise OptionError(f"{', '.join(given)} and --dial together",
                          fix="leave them out: the dial studies a method as configured, on benches it builds "
                              "at the rhos it sets")
    if slots is None:
        raise OptionError("the dial runs on the local executor", fix="leave --executor out")
    if len(plan.methods) != 1:
        raise OptionError(f"the dial trains one method, not {len(plan.methods)}",
                          fix="pass --methods NAME with one name (default multi_similarity)")
    dialled = run_dial(method=plan.methods[0], seeds=seeds or 1, masks=[masks] if masks else DIAL_MASKS,
                       bench_preset=bench_preset, bench_seed=bench_seed, slots=slots,
                       explain_images=plan.explain_images, log=click.echo)
    if not dialled.points:
        raise _nothing_measured(dialled.failures)
    click.echo("\n" + dialled.report["dial_md"].read_text(encoding="utf-8"))
    click.echo(f"report: {dialled.report['dial_md']} and {dialled.report['dial_png']}")
    _exit_partial_on(dialled.failures)


def _nothing_measured(failures: dict[str, str]) -> BgbiasError:
    return BgbiasError(f"every run failed ({len(failures)}): {', '.join(failures)}",
                       fix="see each error with `bgbias study --status` (same options), then run the command "
                                "again")


def _exit_partial_on(failures: dict[str, str]) -> None:
    """List the failed runs and exit with EXIT_PARTIAL, if any failed."""
    if failures:
        click.secho(f"error: {len(failures)} run(s) failed, left out of the report:", err=True, fg="red")
        for name, error in failures.items():
            click.secho(f"  {name}: {error.splitlines()[0]}", err=True, fg="red")
        click.get_current_context().exit(EXIT_PARTIAL)
