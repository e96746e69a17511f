"""The commands that put runs together: ``report`` (a table of evaluated runs) and ``study`` (the whole
measurement on the bench, and the bias dial)."""

from __future__ import annotations

from pathlib import Path

import click

from bgbias.cli.options import PATH_DIR, study_bench_options
from bgbias.errors import EXIT_PARTIAL, BgbiasError, OptionError


@click.command("report")
@click.argument("run_dirs", nargs=-1, type=PATH_DIR, metavar="RUN...")
@click.option("--split", type=click.Choice(["test", "val"]), default="test", show_default=True)
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
    f"{EXIT_PARTIAL} when some runs failed: the study went on with the others, the report leaves the failed "
    "ones out and names them, and the study folder's failures.json has each error and traceback (the next "
    "`bgbias study` tries them again).",
)
@click.option("--preset", type=click.Choice(["quick", "full"]), default="quick", show_default=True,
              help="quick: multi-similarity, one training seed, exact masks (within 15 minutes on 2 CPU "
                   "cores); full: the paper's six baselines and DCML, SAM, MetricFormer and AVSL, three "
                   "seeds, U²-Net masks (hours; resumable).")
@click.option("--methods", default=None,
              help="Comma-separated methods instead of the preset's (see `bgbias methods`).")
@click.option("--seeds", type=click.IntRange(min=1), default=None,
              help="Training seeds 0 … N−1 instead of the preset's.")
@click.option("--masks", "masks", type=click.Choice(["u2netp", "ground-truth"]), default=None,
              help="Masks for BGAugment and the corrupted sets instead of the preset's (quick: the bench's "
                   "exact ones; full: U²-Net's, as on a real dataset).")
@click.option("--dial", is_flag=True,
              help="The bias dial instead: one method (--methods, default multi_similarity) without and with "
                   "BGAugment on the bench rebuilt at rho 0, 0.5, 0.9 and 1, with exact and U²-Net masks "
                   "(--masks: one of them), and the drop plotted against rho.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Train every run as a variant of its method: a method option or optimiser setting, e.g. "
                   "--set loss.certainty_min=global (repeatable). The variant's runs and page get folders of "
                   "their own.")
@study_bench_options
@click.option("--device", default="auto", show_default=True, help="auto (CUDA when present), cpu or cuda.")
@click.pass_context
def study(ctx: click.Context, preset: str, methods: str | None, seeds: int | None, masks: str | None,
          dial: bool, settings: tuple[str, ...], bench_preset: str, rho: float, bench_seed: int,
          device: str) -> None:
    """The main job on the embedded default: the paper's measurement on the bench, from nothing to one report
    page (assets, pools, bench, masks, every planned run trained without and with BGAugment, clean vs
    corrupted MAP@R, foreground scores; study.md and a self-contained study.html with the spread over
    training seeds). Resumable at every step."""
    from bgbias.paths import backgrounds_root
    from bgbias.report.console import format_asset_status, format_bench_summary, format_pools_summary
    from bgbias.study.dial import DIAL_MASKS, run_dial
    from bgbias.study.pipeline import run_study
    from bgbias.study.plan import study_plan

    chosen = [name.strip() for name in methods.split(",") if name.strip()] if methods else None
    plan = study_plan(preset, chosen, seeds, masks, settings)
    if dial:
        if settings:
            raise OptionError("--set and --dial together",
                              fix="leave --set out: the dial studies a method as configured")
        if ctx.get_parameter_source("rho") != click.core.ParameterSource.DEFAULT:
            raise OptionError("--rho and --dial together", fix="leave --rho out: the dial sets rho itself")
        if len(plan.methods) != 1:
            raise OptionError(f"the dial trains one method, not {len(plan.methods)}",
                              fix="pass --methods NAME with one name (default multi_similarity)")
        dialled = run_dial(method=plan.methods[0], seeds=seeds or 1, masks=[masks] if masks else DIAL_MASKS,
                           bench_preset=bench_preset, bench_seed=bench_seed, device=device, log=click.echo)
        if not dialled.points:
            raise _nothing_measured(dialled.failures)
        click.echo("\n" + dialled.report["dial_md"].read_text(encoding="utf-8"))
        click.echo(f"report: {dialled.report['dial_md']} and {dialled.report['dial_png']}")
        _exit_partial_on(dialled.failures)
        return
    result = run_study(plan=plan, bench_preset=bench_preset, rho=rho, bench_seed=bench_seed, device=device,
                       log=click.echo)
    if not result.runs:
        raise _nothing_measured(result.failures)
    for text in (
        format_asset_status(result.bench.assets),
        format_pools_summary(result.bench.pools, str(backgrounds_root())),
        format_bench_summary(result.bench.bench),
        result.report["table_md"].read_text(encoding="utf-8"),
        result.report["seeds_md"].read_text(encoding="utf-8"),
    ):
        click.echo("\n" + text)
    click.echo(f"report: {result.report['study_html']} (one page, pictures included) and "
               f"{result.report['study_md']}; per-run reports, plots and galleries in each run's eval/ and "
               "explain/ folders")
    _exit_partial_on(result.failures)


def _nothing_measured(failures: dict[str, str]) -> BgbiasError:
    return BgbiasError(f"every run failed ({len(failures)}): {', '.join(failures)}",
                       fix="see failures.json in the study folder for each error, then run the command again")


def _exit_partial_on(failures: dict[str, str]) -> None:
    """List the failed runs and exit with EXIT_PARTIAL, if any failed."""
    if failures:
        click.secho(f"error: {len(failures)} run(s) failed, left out of the report:", err=True, fg="red")
        for name, error in failures.items():
            click.secho(f"  {name}: {error.splitlines()[0]}", err=True, fg="red")
        click.get_current_context().exit(EXIT_PARTIAL)
