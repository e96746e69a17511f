"""The paste control's known answers (issue 50): generated images and two tiny encoders whose reading of the
profile is known, scored through the variants' own rendering and the decomposition of the drop.

The data: 4 classes × 8 images at a 40-px crop, classes interleaved in query order (so ties of identical
embeddings favour no class). An image of class c is a bright grey square of side 10 + 4c (at a random place,
its grey jittered) with a *sharp* edge, on a uniform dark background of the class's colour (jittered). Its
mask is exact outside the square and soft inside it: it rises from 51 at the square's outermost pixels to 255
four pixels in, as a matting mask's soft rim does. The pool is uniform dark colours of no class.
"""

from __future__ import annotations

import numpy as np
import pytest

from bgbias.bgaugment.composite import composite_pixels
from bgbias.measurement import decomposition
from bgbias.measurement.intervals import paired_differences
from bgbias.measurement.summary import PROFILE_SETS
from bgbias.retrieval.metrics import METRICS, RetrievalScores, score_embeddings
from bgbias.variants.variants import render_variant
from tests.report.synthetic import decomposed, make_run, profiled_report

CLASSES, PER_CLASS, CROP, RIM = 4, 8, 40, 4
BACKGROUNDS = np.array([(60, 0, 0), (0, 60, 0), (0, 0, 60), (60, 60, 0)])
REPEATS = 3
SHARP = 0.5
"""A step counts as an edge from half the image's contrast: the photos' edges are whole steps (1), the
mask's rim makes steps of 51/255 = 0.2."""


def _scene(label: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    side = 10 + 4 * label
    top, left = rng.integers(5, CROP - side - 5, size=2)
    image = np.empty((CROP, CROP, 3), np.uint8)
    image[:] = BACKGROUNDS[label] + rng.integers(-5, 6, size=3).clip(0, None)
    image[top:top + side, left:left + side] = 200 + rng.integers(0, 40)
    rows, columns = np.mgrid[:CROP, :CROP]
    depth = np.minimum.reduce([rows - top, top + side - 1 - rows, columns - left, left + side - 1 - columns])
    mask = np.where(depth >= 0, np.minimum(255, 51 * (depth + 1)), 0).astype(np.uint8)
    return image, mask


@pytest.fixture(scope="module")
def sets() -> dict[str, list[list[np.ndarray]]]:
    """The clean images, the repasted ones (the variant's own rendering) and ``REPEATS`` corrupted draws
    (each image composited onto a pool colour drawn for it, as the corrupted sets composite)."""
    rng = np.random.default_rng(0)
    scenes = [_scene(index % CLASSES, rng) for index in range(CLASSES * PER_CLASS)]
    pool = rng.integers(0, 90, size=(6, 3))
    corrupted = [[composite_pixels(image, mask, np.broadcast_to(pool[rng.integers(len(pool))],
                                                                 image.shape).astype(np.uint8))
                  for image, mask in scenes] for _ in range(REPEATS)]
    return {"clean": [[image for image, _ in scenes]],
            "repasted": [[render_variant("repasted", image, mask) for image, mask in scenes]],
            "random-bg": corrupted}


LABELS = np.arange(CLASSES * PER_CLASS) % CLASSES


def sharp_outline(image: np.ndarray) -> np.ndarray:
    """Reacts only to seams: the number of steps between neighbouring pixels of at least :data:`SHARP` of
    the image's contrast (its grey's range), per crop side. Normalised by the contrast, a uniform
    background of any colour reads the same; on these images it is the square's sharp outline, 4 × its
    side."""
    grey = image.astype(np.float64).mean(axis=2)
    steps = np.concatenate([np.abs(np.diff(grey, axis=0)).ravel(), np.abs(np.diff(grey, axis=1)).ravel()])
    return np.array([np.count_nonzero(steps >= SHARP * np.ptp(grey)) / CROP])


def corner_colour(image: np.ndarray) -> np.ndarray:
    """Reads the background colour: the mean colour of the frame's four 4-px corners, far from any object."""
    corners = [image[:4, :4], image[:4, -4:], image[-4:, :4], image[-4:, -4:]]
    return np.mean([corner.reshape(-1, 3).mean(axis=0) for corner in corners], axis=0) / 255


def _scores(encoder, sets) -> dict[str, list[RetrievalScores]]:
    return {name: [score_embeddings(np.stack([encoder(image) for image in draw]).astype(np.float32), LABELS)
                   for draw in draws] for name, draws in sets.items()}


def test_an_encoder_of_seams_pays_the_paste_and_feels_no_background(sets):
    """Why: the photos' edges are sharp steps and every class's square has its own outline length, so the
    clean images retrieve their class. Compositing through the soft mask replaces each outer step of the
    square by the mask's rim, whose steps (0.2 of the contrast) stay under the encoder's threshold whatever
    uniform colour is behind: repasted and corrupted images alike show no outline at all, so the paste takes
    the retrieval away and a new background takes nothing more."""
    scores = _scores(sharp_outline, sets)
    assert scores["clean"][0].map_at_r == pytest.approx(1.0)
    assert scores["repasted"][0].map_at_r < 0.5
    parts = decomposed(scores["clean"][0], scores["random-bg"], scores["repasted"])["map_at_r"]
    assert parts.paste_cost.difference.low > 0 and parts.paste_cost.p_value < 0.01
    assert parts.background_effect.difference.holds(0.0) and parts.background_effect.p_value > 0.05
    assert parts.background_effect_per_draw.mean == pytest.approx(0.0)
    assert parts.background_effect_per_draw.draws == REPEATS
    assert parts.paste_share == pytest.approx(1.0) and parts.background_share == pytest.approx(0.0)


def test_an_encoder_of_the_background_colour_feels_the_background_and_pays_no_paste(sets):
    """Why: the frame's corners lie far outside every square and its dilated hole, where the repasted image
    is the clean image itself (mask 0, nothing painted in), so the encoder reads the class's colour in both;
    in the corrupted images the corners are a pool colour drawn apart from the class."""
    scores = _scores(corner_colour, sets)
    assert scores["clean"][0].map_at_r == pytest.approx(1.0)
    parts = decomposed(scores["clean"][0], scores["random-bg"], scores["repasted"])["map_at_r"]
    assert parts.paste_cost.difference.holds(0.0) and parts.paste_cost.p_value > 0.05
    assert parts.background_effect.difference.low > 0 and parts.background_effect.p_value < 0.01
    per_draw = parts.background_effect_per_draw
    assert per_draw.mean == pytest.approx(parts.background_effect.difference.estimate)
    assert per_draw.std > 0  # each draw gives the images other pool colours
    assert parts.paste_share == pytest.approx(0.0) and parts.background_share == pytest.approx(1.0)


def test_the_parts_add_up_to_the_drop_for_every_metric(sets):
    def thumbnail(image):  # every pixel counts a little: the object, its seam and the background
        return image.reshape(8, 5, 8, 5, 3).mean(axis=(1, 3)).ravel() / 255

    scores = _scores(thumbnail, sets)
    decomposition = decomposed(scores["clean"][0], scores["random-bg"], scores["repasted"])
    assert set(decomposition) == set(METRICS)
    for metric, parts in decomposition.items():
        drop = parts.drop.difference.estimate
        assert drop > 0, metric
        assert parts.paste_cost.difference.estimate + parts.background_effect.difference.estimate \
            == pytest.approx(drop), metric
        assert parts.paste_share + parts.background_share == pytest.approx(1.0)
        assert parts.drop.queries == len(LABELS)


def test_the_profile_of_a_report_holds_the_decomposition_and_the_control_after_clean(sets):
    scores = _scores(corner_colour, sets)
    clean, corrupted = scores["clean"][0], scores["random-bg"]
    ids = [f"i{index}" for index in range(len(LABELS))]
    profile = profiled_report(clean, corrupted, scores["repasted"], LABELS, ids).profile
    assert [row.set for row in profile.sets][:3] == ["clean", "repasted", "random-bg"]
    assert list(PROFILE_SETS)[1] == "repasted"
    parts = profile.decomposition["map_at_r"]
    assert parts == decomposed(clean, corrupted, scores["repasted"])["map_at_r"]
    repeats = [score.map_at_r for score in corrupted]
    assert parts.drop.difference.estimate == pytest.approx(clean.map_at_r - np.mean(repeats))


def test_the_decomposition_takes_the_headlines_drop_and_resamples_only_its_two_parts(monkeypatch):
    clean, corrupted, labels, ids = make_run(3)
    repasted = make_run(1, seed=7)[1]
    report = profiled_report(clean, corrupted, repasted, labels, ids)
    for metric in METRICS:
        headline = report.confidence.drop[metric]
        assert headline is not None
        assert report.profile.decomposition[metric].drop.model_dump() == headline.model_dump()
    resampled = []

    def counted(pairs, **options):
        resampled.extend(pairs)
        return paired_differences(pairs, **options)

    monkeypatch.setattr(decomposition, "paired_differences", counted)
    drop = dict(report.confidence.drop)
    parts = decomposition.decompose(clean, corrupted, repasted, drop=drop)
    assert sorted(resampled) == sorted((metric, part) for metric in METRICS
                                       for part in ("paste_cost", "background_effect"))
    assert all(parts[metric].drop is drop[metric] for metric in METRICS)  # the headline's own, not a copy
