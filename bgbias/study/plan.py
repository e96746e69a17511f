"""Which runs a study trains: the presets, the methods and seeds of a plan, and a run's folder name."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from bgbias.engine.config import parse_override, resolve_config
from bgbias.errors import OptionError
from bgbias.methods.registry import method_names
from bgbias.options import EXPLAIN_IMAGES
from bgbias.study.spec import STUDY_KEYS

QUICK_METHODS = ("multi_similarity",)
"""The quick study's loss: Multi-Similarity, the loss of the paper's Table 1 that the bench prototype used."""


PAPER_BASELINES = ("contrastive", "triplet", "multi_similarity", "proxy_anchor", "normalized_softmax",
                   "arcface")
"""The losses of the paper's Table 1: the reference a bundled method's own mechanism is compared against."""


FULL_METHODS = (*PAPER_BASELINES, "dcml", "sam", "metricformer", "avsl")
"""The full study: the baselines of the paper's Table 1, then DCML, SAM, MetricFormer and AVSL."""


MASK_SOURCES = ("u2net", "u2netp", "ground-truth")
"""Where a study's masks come from: U²-Net (the paper's protocol; what a real dataset has; ``u2netp``, its
small model) or the bench's exact alpha masks (no mask errors, and no 6 minutes of U²-Net on 2 cores); a
study on a real dataset may also name a folder of masks (:mod:`bgbias.study.spec`)."""


@dataclass(frozen=True)
class StudyRun:
    """One training run of a study: a method, with or without BGAugment, one training seed; ``watch_test``
    also scores the test split after every epoch (``schedule.watch_test``), to measure selection noise;
    ``settings``, ``key=value`` settings (``--set``) that make it a variant of the method."""

    method: str
    bgaugment: bool
    seed: int
    watch_test: bool = False
    settings: tuple[str, ...] = ()

    @property
    def folder_name(self) -> str:
        variant = f"-{settings_slug(self.settings)}" if self.settings else ""
        return f"{self.method}{variant}{'-bgaugment' if self.bgaugment else ''}-seed{self.seed}"

    @property
    def label(self) -> str:
        variant = f" ({', '.join(self.settings)})" if self.settings else ""
        return f"{self.method}{variant}{' + BGAugment' if self.bgaugment else ''}, seed {self.seed}"


def settings_slug(settings: Sequence[str]) -> str:
    """``("loss.certainty_min=global",)`` → ``certainty_min-global``: ``--set`` settings as part of a folder
    name (a method option without its ``loss.``; characters other than letters, digits, ``.``, ``_`` and
    ``-`` become ``_``)."""
    parts = []
    for text in settings:
        key, _, value = text.partition("=")
        parts.append(f"{key.strip().removeprefix('loss.')}-{value.strip()}")
    slug = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in "-".join(parts))
    if len(slug) <= SLUG_LENGTH:
        return slug
    digest = hashlib.sha256("\n".join(settings).encode()).hexdigest()[:8]
    return f"{slug[:SLUG_LENGTH - 9].rstrip('-._')}-{digest}"


SLUG_LENGTH = 48
"""The longest :func:`settings_slug`: a longer one is cut and ends in a digest of all the settings, so that
folder names stay readable and within file systems' limits."""


@dataclass(frozen=True)
class StudyPlan:
    """Which runs a study trains: every method without and with BGAugment, for training seeds 0 … seeds−1; the
    ``watched`` methods' runs also score the test split each epoch, ``profile`` adds each run's profile, and
    ``settings`` (``--set``) make every run a variant of its method."""

    methods: tuple[str, ...]
    seeds: int
    masks: str = "u2netp"
    watched: tuple[str, ...] = ()
    profile: bool = False
    settings: tuple[str, ...] = ()
    explain_images: int = EXPLAIN_IMAGES

    @property
    def report_folder(self) -> str:
        """Where in the study folder the plan's page goes: ``report`` for a preset as it is, else a name of
        its own (``report-dcml-avsl-3seeds``), so that a study of a few methods on the full preset's bench
        does not replace the full preset's page."""
        if self in PRESETS.values():
            return "report"
        variant = f"-{settings_slug(self.settings)}" if self.settings else ""
        return f"report-{'-'.join(self.methods)}{variant}-{self.seeds}seed{'s' * (self.seeds > 1)}"

    def runs(self) -> list[StudyRun]:
        """Seed by seed (a stopped study has whole seeds done first), each method vanilla then BGAugment."""
        return [StudyRun(method, bgaugment, seed, method in self.watched, self.settings)
                for seed in range(self.seeds) for method in self.methods for bgaugment in (False, True)]


PRESETS = {
    "quick": StudyPlan(QUICK_METHODS, 1, masks="ground-truth"),
    "full": StudyPlan(FULL_METHODS, 3, masks="u2netp", watched=QUICK_METHODS, profile=True),
}
"""``quick``: the README's first command, within 15 minutes on 2 CPU cores, on the bench's exact masks and
without profiles; ``full``: the whole comparison on U²-Net masks with every run's profile, the quick preset's
method watching the test split (selection noise, docs/results.md)."""


def study_plan(
    preset: str = "quick",
    methods: Sequence[str] | None = None,
    seeds: int | None = None,
    masks: str | None = None,
    settings: Sequence[str] = (),
    *,
    dataset: str = "bench",
    explain_images: int = EXPLAIN_IMAGES,
) -> StudyPlan:
    """The preset's plan, with ``methods``, ``seeds`` and ``masks`` in its own's place where given and
    ``settings`` (as ``bgbias train --set``) for every run; what cannot be trained is an ``OptionError``
    before any work."""
    if preset not in PRESETS:
        raise OptionError(f"unknown study preset {preset!r}", fix=f"use one of {', '.join(PRESETS)}")
    if masks is not None and masks not in MASK_SOURCES:
        raise OptionError(f"unknown mask source {masks!r}", fix=f"use one of {', '.join(MASK_SOURCES)}")
    plan = PRESETS[preset]
    chosen = tuple(dict.fromkeys(methods)) if methods else plan.methods
    unknown = [name for name in chosen if name not in method_names()]
    if unknown:
        raise OptionError(f"unknown method(s) {', '.join(unknown)}",
                          fix=f"use some of: {', '.join(method_names())}")
    if explain_images < 1:
        raise OptionError(f"a study scores the foreground of at least one image, not {explain_images}",
                          fix="pass --explain-images 1 or more")
    if seeds is not None and seeds < 1:
        raise OptionError(f"a study needs at least one training seed, not {seeds}",
                          fix="pass --seeds 1 or more")
    for text in settings:
        key, _ = parse_override(text)
        if key in (*STUDY_KEYS, "method", "dataset"):
            raise OptionError(f"the study sets {key} for each run itself, not --set",
                              fix="use --dataset, --root, --seeds, --masks or --backgrounds; leave the "
                                  "rest to the study")
    for method in chosen:
        resolve_config(method, dataset, overrides=tuple(settings))
    return dataclasses.replace(plan, methods=chosen, seeds=plan.seeds if seeds is None else seeds,
                               masks=plan.masks if masks is None else masks, settings=tuple(settings),
                               explain_images=explain_images)
