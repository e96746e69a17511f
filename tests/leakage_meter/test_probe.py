"""The cross-validated nearest-class-mean probe: folds by image within each class, exact and seeded."""

from __future__ import annotations

import numpy as np

from bgbias.leakage_meter.probe import probe_chance, probe_folds, probe_predictions


def test_folds_deal_each_class_over_every_fold_and_follow_the_seed():
    labels = np.repeat([3, 7, 9], 10)
    folds = probe_folds(labels, 5, seed=0)
    for label in (3, 7, 9):
        assert sorted(np.bincount(folds[labels == label], minlength=5)) == [2] * 5
    assert np.array_equal(folds, probe_folds(labels, 5, seed=0))
    assert not np.array_equal(folds, probe_folds(labels, 5, seed=1))


def test_separable_classes_are_named_and_noise_is_not():
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], 20)
    centres = np.eye(3) * 10
    separable = centres[labels] + rng.normal(size=(60, 3))
    assert np.array_equal(probe_predictions(separable, labels), labels)
    noise = rng.normal(size=(60, 3))
    assert (probe_predictions(noise, labels) == labels).mean() < 0.6


def test_chance_is_the_largest_class_share():
    assert probe_chance(np.array([0, 0, 0, 1])) == 0.75
    assert probe_chance(np.repeat([0, 1, 2, 3], 5)) == 0.25
