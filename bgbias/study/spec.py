"""What a study is about: its dataset (the bench of given settings, CUB, Cars196, SOP or a folder), where that
dataset, its masks and its background pools are, and the configuration each of its runs trains with.

A :class:`StudySpec` is part of the study folder's plan (:mod:`bgbias.study.ledger`): a later command on the
same folder must describe the same study, or it would mix the runs of two datasets on one page.
"""

from __future__ import annotations

import os
from pathlib import Path

from bgbias.data.items import folder_key, model_masks_dir
from bgbias.data.registry import dataset_class, default_root
from bgbias.errors import OptionError
from bgbias.options import DEFAULT_MASK_MODEL
from bgbias.paths import backgrounds_root, located_key, masks_root
from bgbias.schema import ClosedRecord

MASK_MODELS = ("u2net", "u2netp")
"""The U²-Net models a study can make masks with: ``u2net``, the paper's (176 MB), and ``u2netp`` (4.6 MB)."""


BENCH_MASKS = "ground-truth"
"""The bench's exact alpha masks: no U²-Net pass, no mask errors (the quick preset's)."""


COMPUTE_KEYS = ("device", "amp", "model.memory_format", "model.compile", "data.workers")
"""Settings that say how a run is computed, not what it trains: a study's runs take them from the machine
each one runs on, and a finished run trained under others is kept (docs/hardware.md: the scores agree within
the spread over training seeds)."""


STUDY_KEYS = ("root", "seed", "bgaugment.enabled", "bgaugment.masks", "bgaugment.backgrounds",
              "schedule.watch_test")
"""Settings the study sets for each run itself: ``--set`` may not change them."""


class BenchSettings(ClosedRecord):
    """The bench a study builds (``bgbias bench``'s settings)."""

    preset: str
    rho: float
    seed: int


class StudySpec(ClosedRecord):
    """A study's dataset and inputs, all as absolute paths: ``masks`` is a U²-Net model
    (:data:`MASK_MODELS`), ``ground-truth`` (the bench) or ``folder`` (the user's masks, already in
    ``masks_dir``); ``backgrounds`` holds the ``train/`` and ``test/`` pools. ``compare_masks`` and
    ``compare_masks_dir``: a second mask source of the same kinds, whose corrupted repeats each run's
    evaluation scores beside the first's (its ``mask_sensitivity``); None for none."""

    dataset: str
    root: str
    bench: BenchSettings | None = None
    masks: str
    masks_dir: str
    backgrounds: str
    compare_masks: str | None = None
    compare_masks_dir: str | None = None

    @property
    def made_masks(self) -> bool:
        """Whether the study makes its masks with U²-Net (a sharded step) rather than finding them."""
        return self.masks in MASK_MODELS

    def made_sources(self) -> list[tuple[str, str]]:
        """The U²-Net models the masks steps run and the folder each writes, the study's own first."""
        sources = [(self.masks, self.masks_dir), (self.compare_masks, self.compare_masks_dir)]
        return [(model, folder) for model, folder in sources if model in MASK_MODELS and folder is not None]

    @property
    def title(self) -> str:
        """How the page names the study (no path: the page of a copied folder reads the same)."""
        if self.bench is not None:
            return (f"bench {self.bench.preset}, rho {self.bench.rho:g}, bench seed {self.bench.seed}, "
                    f"{self.masks} masks")
        source = "own" if self.masks == "folder" else self.masks
        return f"{self.dataset}, {source} masks"


def with_compare_masks(spec: StudySpec, compare: str | None) -> StudySpec:
    """``spec`` with the second mask source ``compare`` (:func:`mask_source`'s vocabulary), or as it is for
    None; the study's own source is refused: the difference would be zero by construction."""
    if compare is None:
        return spec
    bench = spec.bench is not None
    source, folder = mask_source(spec.dataset, Path(spec.root), compare, bench=bench,
                                 option="--compare-masks")
    if _absolute(folder) == spec.masks_dir:
        raise OptionError(f"--compare-masks names the study's own masks ({compare}): there is nothing to "
                          "compare them with", path=folder,
                          fix="pass --compare-masks another source (u2net, u2netp, ground-truth on the bench "
                              "or a folder of masks) or leave it out")
    return spec.model_copy(update={"compare_masks": source, "compare_masks_dir": _absolute(folder)})


def mask_source(dataset: str, root: Path, chosen: str, *, bench: bool,
                option: str = "--masks") -> tuple[str, Path]:
    """The source (a model of :data:`MASK_MODELS`, ``ground-truth`` or ``folder``) and masks folder that
    ``chosen`` names for the dataset at ``root``: a model's or the exact masks' usual folder, or a folder of
    masks made before, which must exist on a real dataset."""
    if bench and (chosen == BENCH_MASKS or chosen in MASK_MODELS):  # where `bgbias masks --model X` puts them
        return chosen, model_masks_dir(masks_root() / folder_key(dataset_class("bench"), root), chosen)
    if chosen in MASK_MODELS:
        return chosen, masks_root() / located_key(f"{dataset}-{chosen}", root)
    if chosen == BENCH_MASKS:
        raise OptionError("exact masks exist for the bench only",
                          fix=f"pass {option} {' or '.join(MASK_MODELS)}, or a folder of masks")
    folder = Path(chosen)
    if not bench and not folder.is_dir():
        raise OptionError(f"{option} is neither a U²-Net model ({', '.join(MASK_MODELS)}) nor a folder",
                          path=folder, fix="pass a model name or the folder `bgbias masks` wrote")
    return "folder", folder


def study_spec(
    dataset: str,
    root: str | os.PathLike[str] | None,
    masks: str | None,
    backgrounds: str | os.PathLike[str] | None,
    *,
    bench: tuple[str, float, int] = ("small", 0.9, 0),
    compare_masks: str | None = None,
    dry_run: bool = False,
) -> StudySpec:
    """The spec of ``bgbias study --dataset DATASET``: the bench of ``bench`` (preset, ρ, seed) settings, or
    the real dataset at ``root`` (:func:`dataset_spec`, which a ``dry_run`` lets be missing), with the second
    mask source ``compare_masks`` where one is given (:func:`with_compare_masks`)."""
    if dataset != "bench":
        spec = dataset_spec(dataset, root, masks, backgrounds, dry_run=dry_run)
    elif root is not None:
        raise OptionError("the study builds the bench itself: --root is for a real dataset",
                          fix="leave --root out, or pass --dataset cub|cars|sop|folder with it")
    else:
        spec = bench_spec(*bench, masks or BENCH_MASKS, backgrounds)
    return with_compare_masks(spec, compare_masks)


def dataset_spec(
    dataset: str,
    root: str | os.PathLike[str] | None,
    masks: str | None,
    backgrounds: str | os.PathLike[str] | None,
    *,
    dry_run: bool = False,
) -> StudySpec:
    """The spec of a study on a real dataset (``cub``, ``cars``, ``sop``, ``folder``), its masks from
    ``masks`` (a model of :data:`MASK_MODELS` or a folder of masks). A root that is not a folder is refused,
    but for a ``dry_run`` on a dataset of known size, which it prices from that size
    (:mod:`bgbias.study.sizes`)."""
    layout = dataset_class(dataset)  # an unknown name is an OptionError listing the known ones
    if dataset == "bench":
        raise OptionError("the bench is built by the study itself, from its --bench-* settings",
                          fix="leave --dataset out (or pass --dataset bench) without --root")
    folder = Path(root) if root is not None else default_root(dataset)
    if not folder.is_dir() and not (dry_run and layout.known_size is not None):
        raise OptionError(f"the {dataset} dataset is not at {folder}", path=folder,
                          fix=f"pass --root DIR (`bgbias datasets --dataset {dataset} --root DIR` checks it)")
    source, masks_dir = mask_source(dataset, folder, masks or DEFAULT_MASK_MODEL, bench=False)
    pools = Path(backgrounds) if backgrounds is not None else backgrounds_root()
    return StudySpec(dataset=dataset, root=_absolute(folder), masks=source, masks_dir=_absolute(masks_dir),
                     backgrounds=_absolute(pools))


def bench_spec(preset: str, rho: float, seed: int, masks: str,
               backgrounds: str | os.PathLike[str] | None = None) -> StudySpec:
    """The spec of a study on the bench built with these settings (:func:`study_bench_root`)."""
    root = study_bench_root(preset, rho, seed).expanduser().resolve()
    source, masks_dir = mask_source("bench", root, masks, bench=True)
    pools = Path(backgrounds) if backgrounds is not None else backgrounds_root()
    bench = BenchSettings(preset=preset, rho=rho, seed=seed)
    return StudySpec(dataset="bench", root=_absolute(root), bench=bench, masks=source,
                     masks_dir=_absolute(masks_dir), backgrounds=_absolute(pools))


def study_bench_root(preset: str, rho: float, seed: int) -> Path:
    """Where a study keeps the bench of these settings: ``<data-root>/bench`` for the defaults, else
    ``<data-root>/bench-<preset>-rho<rho>-seed<seed>``, so the dial's benches live side by side."""
    default = default_root("bench")
    if (preset, rho, seed) == ("small", 0.9, 0):
        return default
    return default.with_name(f"bench-{preset}-rho{rho:g}-seed{seed}")


def _absolute(path: Path) -> str:
    return os.path.abspath(os.path.expanduser(path))
