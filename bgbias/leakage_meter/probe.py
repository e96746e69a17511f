"""A cross-validated linear probe of the class: a nearest class mean in squared L2, fitted on the other folds
and read on each fold's images; exact and deterministic (nothing random but the folds). Folds are cut class
by class, so every class with at least :data:`PROBE_FOLDS` images is in every fold's training part.
"""

from __future__ import annotations

import numpy as np

PROBE_FOLDS = 5
"""Folds of the probe's cross-validation."""


def probe_folds(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """The fold (0 … ``folds`` − 1) of each image: each class's images in an order ``seed`` shuffles, dealt
    out in turn, starting where the previous class stopped so that folds stay even in size."""
    rng = np.random.default_rng(seed)
    fold_of = np.empty(len(labels), np.int64)
    start = 0
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        fold_of[members] = (start + np.arange(len(members))) % folds
        start += len(members)
    return fold_of


def probe_predictions(embeddings: np.ndarray, labels: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """Each image's predicted class, by the nearest class mean of the other folds' images (labels as
    given). A fold whose training part lacks a class never predicts it."""
    embeddings = np.asarray(embeddings, np.float64)
    labels = np.asarray(labels)
    classes = np.unique(labels)
    fold_of = probe_folds(labels, PROBE_FOLDS, seed)
    predicted = np.empty_like(labels)
    for fold in range(PROBE_FOLDS):
        held_out = fold_of == fold
        if not held_out.any():
            continue
        train_x, train_y = embeddings[~held_out], labels[~held_out]
        present = np.array([c for c in classes if (train_y == c).any()])
        means = np.stack([train_x[train_y == c].mean(axis=0) for c in present])
        scores = 2 * embeddings[held_out] @ means.T - (means**2).sum(axis=1)
        predicted[held_out] = present[scores.argmax(axis=1)]
    return predicted


def probe_chance(labels: np.ndarray) -> float:
    """The accuracy of the best guess that sees no image: always the largest class (1 / classes where they
    are of one size)."""
    _, sizes = np.unique(np.asarray(labels), return_counts=True)
    return float(sizes.max() / sizes.sum())
