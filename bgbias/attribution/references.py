"""Reference images for an attribution that explains an image against another (SAM's similarity attention).

An image's reference is its nearest other classmate in the whole split, by the model's own retrieval (the
match a retrieval system would show first); an image alone in its class takes its nearest of any class.
Ranking classmates alone gives the same first classmate at a search per class instead of one over the split;
the searches are exact, so a re-run or another ``--limit`` gives every image the same reference.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bgbias.data.items import Item
from bgbias.data.transforms import EvalGeometry
from bgbias.engine.split_states import SplitStates
from bgbias.errors import OptionError
from bgbias.methods.attribution import REFERENCE_RULE
from bgbias.retrieval.state import model_form, take_rows

if TYPE_CHECKING:
    from bgbias.methods.embedding_model import EmbeddingModel
    from bgbias.retrieval.retrievers import Retrieval

EMBED_BATCH = 64
"""Images per forward pass when the reference images are embedded (no gradients)."""


def reference_rule(model: EmbeddingModel) -> str:
    """The rule as an explain ledger records it: :data:`REFERENCE_RULE` and how the model ranks."""
    return f"{REFERENCE_RULE} (this model's retrieval: {model.retrieval().describe()})"


def check_reference_pool(items: Sequence[Item], pool: Sequence[Item]) -> None:
    """An ``OptionError`` unless ``pool`` holds every item explained and at least two images."""
    _require_two(len(pool))
    known = {item.id for item in pool}
    outside = [item.id for item in items if item.id not in known]
    if outside:
        raise OptionError(f"{len(outside)} explained images are not among the reference images: "
                          f"{', '.join(outside[:5])}", fix="pass reference images that include them")


def pick_references(
    model: EmbeddingModel,
    pool: Sequence[Item],
    wanted: Sequence[Item],
    geometry: EvalGeometry,
    dataset_name: str,
    *,
    progress: bool = False,
    log: Callable[[str], None] = print,
    on_disk: bool = True,
) -> dict[str, Item]:
    """Each of ``wanted``'s reference among ``pool`` (which holds them), by id: ``pool``'s clean state at the
    evaluation ``geometry`` (from the model's evaluation cache where ``bgbias eval`` left it, unless not
    ``on_disk``) ranked by the model's retrieval (see the module docstring)."""
    if not wanted:
        return {}
    positions = {item.id: index for index, item in enumerate(pool)}
    states = SplitStates(model, dataset_name, pool, geometry, batch_size=EMBED_BATCH, progress=progress,
                         log=log, on_disk=on_disk)
    chosen = nearest_references(model.retrieval(), states.clean(), states.labels,
                                [positions[item.id] for item in wanted])
    return {item.id: pool[reference] for item, reference in zip(wanted, chosen, strict=True)}


def nearest_references(
    retrieval: Retrieval, state: Mapping[str, Any], labels: np.ndarray, queries: Sequence[int]
) -> list[int]:
    """For each position in ``queries``: the position of its nearest other row of its label, ranked by
    ``retrieval`` among the rows of that label; of any label where it is the only row of its own.
    ``state`` holds the named arrays of every row (``labels`` the rows' labels)."""
    labels = np.asarray(labels)
    _require_two(len(labels))
    members: dict[int, list[int]] = defaultdict(list)
    for position, label in enumerate(labels.tolist()):
        members[label].append(position)
    found: dict[int, int] = {}
    for label in sorted({int(labels[query]) for query in queries}):
        rows = np.asarray(members[label], dtype=np.int64)
        if len(rows) < 2:
            continue
        nearest = retrieval.neighbours(model_form(take_rows(state, rows)), 1)[:, 0]
        found.update(zip(rows.tolist(), rows[nearest].tolist(), strict=True))
    if any(query not in found for query in queries):
        anywhere = retrieval.neighbours(model_form(dict(state)), 1)[:, 0]
        for query in queries:
            found.setdefault(query, int(anywhere[query]))
    return [found[query] for query in queries]


def _require_two(count: int) -> None:
    """An ``OptionError`` unless there are at least two images to pick references from."""
    if count < 2:
        raise OptionError("an attribution with reference images needs at least two images to pick them from",
                          fix="explain a split of two images or more")
