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
    ``masks_dir``); ``backgrounds`` holds the ``train/`` and ``test/`` pools."""

    dataset: str
    root: str
    bench: BenchSettings | None = None
    masks: str
    masks_dir: str
    backgrounds: str

    @property
    def made_masks(self) -> bool:
        """Whether the study makes the masks with U²-Net (a sharded step) rather than finding them."""
        return self.masks in MASK_MODELS

    @property
    def title(self) -> str:
        """How the page names the study (no path: the page of a copied folder reads the same)."""
        if self.bench is not None:
            return (f"bench {self.bench.preset}, rho {self.bench.rho:g}, bench seed {self.bench.seed}, "
                    f"{self.masks} masks")
        source = "own" if self.masks == "folder" else self.masks
        return f"{self.dataset}, {source} masks"


def study_spec(
    dataset: str,
    root: str | os.PathLike[str] | None,
    masks: str | None,
    backgrounds: str | os.PathLike[str] | None,
    *,
    bench: tuple[str, float, int] = ("small", 0.9, 0),
    dry_run: bool = False,
) -> StudySpec:
    """The spec of ``bgbias study --dataset DATASET``: the bench of ``bench`` (preset, ρ, seed) settings, or
    the real dataset at ``root`` (:func:`dataset_spec`, which a ``dry_run`` lets be missing)."""
    if dataset != "bench":
        return dataset_spec(dataset, root, masks, backgrounds, dry_run=dry_run)
    if root is not None:
        raise OptionError("the study builds the bench itself: --root is for a real dataset",
                          fix="leave --root out, or pass --dataset cub|cars|sop|folder with it")
    return bench_spec(*bench, masks or BENCH_MASKS, backgrounds)


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
    chosen = masks or DEFAULT_MASK_MODEL
    if chosen in MASK_MODELS:
        masks_dir = masks_root() / located_key(f"{dataset}-{chosen}", folder)
        source = chosen
    elif chosen == BENCH_MASKS:
        raise OptionError("exact masks exist for the bench only",
                          fix=f"pass --masks {' or '.join(MASK_MODELS)}, or a folder of masks")
    else:
        masks_dir = Path(chosen)
        if not masks_dir.is_dir():
            raise OptionError(f"--masks is neither a U²-Net model ({', '.join(MASK_MODELS)}) nor a folder",
                              path=masks_dir, fix="pass a model name or the folder `bgbias masks` wrote")
        source = "folder"
    pools = Path(backgrounds) if backgrounds is not None else backgrounds_root()
    return StudySpec(dataset=dataset, root=_absolute(folder), masks=source, masks_dir=_absolute(masks_dir),
                     backgrounds=_absolute(pools))


def bench_spec(preset: str, rho: float, seed: int, masks: str,
               backgrounds: str | os.PathLike[str] | None = None) -> StudySpec:
    """The spec of a study on the bench built with these settings (:func:`study_bench_root`)."""
    root = study_bench_root(preset, rho, seed).expanduser().resolve()
    if masks == BENCH_MASKS or masks in MASK_MODELS:  # where `bgbias masks --model MASKS` puts them
        masks_dir = model_masks_dir(masks_root() / folder_key(dataset_class("bench"), root), masks)
        source = masks
    else:
        masks_dir, source = Path(masks), "folder"
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
