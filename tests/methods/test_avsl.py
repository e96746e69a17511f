"""AVSL's self-tests (docs/methods/avsl.md, *Self-tests*): the graph distance's properties, the degenerate
case, the normalised edges, the attribution decomposition, the pooling linearisation, chunked ranking,
gradient routing, the edge EMA, the losses, the options and a recorded run."""

from __future__ import annotations

import io
import itertools
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from bgbias.cli import main
from bgbias.engine.checkpoint import load_checkpoint, save_checkpoint
from bgbias.engine.config import load_run_config, resolve_config
from bgbias.engine.method_model import MethodModel, weights_sha256
from bgbias.engine.trained import load_trained
from bgbias.engine.training import train
from bgbias.errors import OptionError
from bgbias.methods.avsl import method as avsl_method
from bgbias.methods.avsl.graph import (
    Graph,
    Levels,
    activation_maps,
    batch_edges,
    certainty,
    graph_distance,
    node_contributions,
    node_differences,
    node_weights,
    normalised_edges,
    pooled_embedding,
    rectify,
)
from bgbias.methods.avsl.losses import hard_triplets, margin_loss, proxy_anchor_loss
from bgbias.methods.avsl.method import AVSL, default_top_k
from bgbias.methods.base import Batch, MethodSpec
from bgbias.models.registry import build_backbone
from bgbias.retrieval.retrievers import LearnedDistance
from tests.calibration import calibrate_batchnorm
from tests.conftest import tiny_config

CLASSES, PER_CLASS, SIDE, DIM = 3, 4, 32, 16


def toy_avsl(num_classes: int = CLASSES, **options) -> AVSL:
    torch.manual_seed(0)
    defaults = resolve_config("avsl", "folder").loss
    spec = MethodSpec(DIM, num_classes, 1000, options={**defaults, **options}, input_size=SIDE)
    return calibrate_batchnorm(AVSL(build_backbone("tiny_cnn", pretrained=False), spec))


def toy_batch(seed: int = 1, labels: torch.Tensor | None = None) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(CLASSES * PER_CLASS, 3, SIDE, SIDE, generator=generator)
    if labels is None:
        labels = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    return Batch(images, labels, torch.arange(CLASSES * PER_CLASS))


def random_levels(n: int, r: int, generator: torch.Generator, dtype=torch.float64) -> Levels:
    units = tuple(F.normalize(torch.randn(n, r, generator=generator, dtype=dtype), dim=1) for _ in range(3))
    certainties = tuple(0.05 * torch.rand(n, r, generator=generator, dtype=dtype) for _ in range(2))
    return Levels(units, certainties)


def random_graph(r: int, k: int, generator: torch.Generator, dtype=torch.float64) -> Graph:
    """Edges with at least k positive correlations per high node, random slopes and biases."""
    edges = tuple(normalised_edges(torch.rand(r, r, generator=generator, dtype=dtype) - 0.3, k)
                  for _ in range(2))
    slope = tuple(1 + torch.randn(r, generator=generator, dtype=dtype) for _ in range(2))
    bias = tuple(0.3 * torch.randn(r, generator=generator, dtype=dtype) for _ in range(2))
    return Graph(edges, slope, bias, 10.0)


def reliabilities(rows: Levels, cols: Levels, graph: Graph) -> list[torch.Tensor]:
    return [torch.sigmoid(graph.gain * (graph.slope[i] * rows.certainty[i][:, None] * cols.certainty[i][None]
                                        + graph.bias[i])) for i in range(2)]


# --------------------------------------------------------------------------------- the graph distance
def test_a_state_s_own_distance_is_zero_and_distances_are_symmetric_and_non_negative():
    generator = torch.Generator().manual_seed(0)
    states, graph = random_levels(9, 12, generator), random_graph(12, 3, generator)
    d, levels, _ = graph_distance(states, states, graph)
    assert torch.equal(d.diagonal(), torch.zeros(9, dtype=d.dtype))
    assert torch.allclose(d, d.T, atol=1e-12) and (d >= 0).all()
    assert d[~torch.eye(9, dtype=torch.bool)].min() > 1e-3  # not vacuous: distinct states are apart
    assert torch.allclose(levels[0], torch.cdist(states.units[0], states.units[0]) ** 2, atol=1e-12)
    # the same through a trained-shape method and its named state
    method = toy_avsl().double().eval()
    with torch.no_grad():
        state = method.embed(toy_batch().images.double())
        distances = method.pairwise_distance(state, state)
    assert torch.equal(distances.diagonal(), torch.zeros(len(distances), dtype=distances.dtype))
    assert torch.allclose(distances, distances.T, atol=1e-12) and (distances >= 0).all()


def test_an_infinite_reliability_bias_gives_the_plain_top_level_squared_distance():
    generator = torch.Generator().manual_seed(1)
    rows, cols, graph = random_levels(5, 12, generator), random_levels(7, 12, generator), random_graph(12, 3,
                                                                                                        generator)
    top = torch.cdist(rows.units[2], cols.units[2]) ** 2
    sure = Graph(graph.edges, graph.slope, tuple(torch.full_like(b, 1e4) for b in graph.bias), graph.gain)
    assert torch.allclose(graph_distance(rows, cols, sure)[0], top, atol=1e-12)
    assert not torch.allclose(graph_distance(rows, cols, graph)[0], top, atol=1e-3)  # β = 0-ish differs


def test_normalised_edges_keep_each_high_node_s_top_k_low_nodes_and_sum_to_one():
    generator = torch.Generator().manual_seed(2)
    r, k = 10, 3
    edges = torch.rand(r, r, generator=generator) - 0.2  # low × high, continuous: no ties
    edges[:, 4] = -torch.rand(r, generator=generator)  # high node 4: no positive correlation
    edges[:, 5] = -1.0
    edges[2, 5] = 0.5  # high node 5: one positive correlation, fewer than k
    w = normalised_edges(edges, k)
    for n in range(r):
        if n in (4, 5):
            continue
        assert (w[n] > 0).sum() == k
        assert set(w[n].nonzero().flatten().tolist()) == set(edges[:, n].topk(k).indices.tolist())
        assert w[n].sum() == pytest.approx(1.0, abs=1e-6)
    assert (w[4] == 0).all()  # its correction term is 0
    assert w[5].nonzero().flatten().tolist() == [2] and w[5, 2] == pytest.approx(1.0, abs=1e-6)


def rectified_distance(nodes, reliabilities, edges):
    """d̂ level by level from the rectification formula alone: the reference graph_distance must match."""
    hat = nodes[0]
    for delta, p, w in zip(nodes[1:], reliabilities, edges, strict=True):
        hat = rectify(hat, delta, p, w)
    return hat.sum(dim=-1)


def test_property_1_node_contributions_sum_to_the_distance_and_weights_to_r():
    generator = torch.Generator().manual_seed(3)
    r = 8
    rows, cols, graph = random_levels(4, r, generator), random_levels(5, r, generator), random_graph(r, 3,
                                                                                                      generator)
    nodes = [node_differences(a, b) for a, b in zip(rows.units, cols.units, strict=True)]
    p = reliabilities(rows, cols, graph)
    d = rectified_distance(nodes, p, graph.edges)
    assert torch.allclose(d, graph_distance(rows, cols, graph)[0], atol=1e-12)
    contributions = node_contributions(nodes, p, graph.edges)
    assert torch.allclose(sum(c.sum(dim=-1) for c in contributions), d, atol=1e-12)
    weights = node_weights(p, graph.edges)
    assert torch.allclose(sum(w.sum(dim=-1) for w in weights), torch.full_like(d, float(r)), atol=1e-9)
    # the paper's matrices for one pair: Λ^3 = P^3, Λ^2 = (I − P^3) W̃^3 P^2, Λ^1 = (I − P^3) W̃^3 (I − P^2) W̃^2
    eye = torch.eye(r, dtype=d.dtype)
    p2, p3 = torch.diag(p[0][1, 2]), torch.diag(p[1][1, 2])
    w2, w3 = graph.edges
    lambdas = [(eye - p3) @ w3 @ (eye - p2) @ w2, (eye - p3) @ w3 @ p2, p3]
    for level, matrix in enumerate(lambdas):
        assert torch.allclose(torch.ones(r, dtype=d.dtype) @ matrix, weights[level][1, 2], atol=1e-12)


# ------------------------------------------------------------------------------------ maps and certainty
def test_the_spatial_mean_of_a_node_s_activation_map_is_its_embedding():
    method = toy_avsl().eval()
    with torch.no_grad():
        features = method.backbone(toy_batch().images, method.backbone.levels)
        for stage, conv in zip(method.backbone.levels, method.embedder, strict=True):
            z = features[stage]
            maps = activation_maps(z, conv)
            assert maps.shape[2:] == z.shape[2:]
            embedding = pooled_embedding(z, conv)
            assert torch.allclose(maps.mean(dim=(2, 3)), embedding, atol=1e-5)
            assert not torch.allclose(conv(z).mean(dim=(2, 3)), embedding, atol=1e-3)  # the spike matters


@pytest.mark.parametrize("minimum", ["row", "global"])
def test_certainty_measures_how_peaked_a_map_is(minimum):
    flat = torch.ones(1, 1, 3, 3)
    peaked = torch.zeros(1, 1, 3, 3)
    peaked[..., 1, 1] = 5.0
    spread = torch.rand(1, 1, 3, 3, generator=torch.Generator().manual_seed(0))
    assert certainty(flat, minimum).item() == 0.0
    assert certainty(peaked, minimum) > certainty(spread, minimum) > 0
    assert certainty(torch.ones(2, 4, 1, 1), minimum).eq(0).all()  # one position: no spread


def test_certainty_shifts_each_row_by_its_own_minimum_or_the_map_by_its_global_one():
    """A hand-computed 2 × 2 map [[1, 3], [2, 6]]. Per row (the authors' code): [[0, 2], [0, 4]] → L1 →
    (0, 1/3, 0, 2/3), whose unbiased variance is (5/9 − 4 · 1/16) / 3 = 11/108. Globally: [[0, 2], [1, 5]]
    → (0, 1/4, 1/8, 5/8), variance (15/32 − 1/4) / 3 = 7/96."""
    maps = torch.tensor([[[[1.0, 3.0], [2.0, 6.0]]]], dtype=torch.float64)
    assert certainty(maps).item() == pytest.approx(math.sqrt(11 / 108), abs=1e-15)  # row: the default
    assert certainty(maps, "row").item() == pytest.approx(math.sqrt(11 / 108), abs=1e-15)
    assert certainty(maps, "global").item() == pytest.approx(math.sqrt(7 / 96), abs=1e-15)
    # rows that differ only by a constant: per row they are the same map, globally the higher row weighs more
    rows = torch.tensor([[[[0.0, 0.0], [5.0, 5.0]]]])
    assert certainty(rows, "row").item() == 0.0
    assert certainty(rows, "global").item() == pytest.approx(torch.tensor([0, 0, 0.5, 0.5]).std().item())
    with pytest.raises(ValueError, match="row, global"):
        certainty(maps, "column")


def authors_certainty(maps: np.ndarray) -> np.ndarray:
    """The authors' arithmetic, re-derived from its equations in float64, one map at a time: subtract each
    row's minimum (the minimum along the width), divide by the sum of the entries (all ≥ 0), and take the
    standard deviation over all positions with n − 1 in the denominator."""
    images, nodes, height, width = maps.shape
    out = np.zeros((images, nodes))
    for b, i in itertools.product(range(images), range(nodes)):
        shifted = np.array([[maps[b, i, y, x] - min(maps[b, i, y]) for x in range(width)]
                            for y in range(height)]).ravel()
        share = shifted / max(shifted.sum(), 1e-12)
        mean = share.sum() / share.size
        out[b, i] = math.sqrt(((share - mean) ** 2).sum() / (share.size - 1))
    return out


def test_the_row_certainty_matches_the_authors_arithmetic_in_float64():
    generator = torch.Generator().manual_seed(7)
    for shape in [(3, 5, 4, 6), (2, 3, 7, 7), (2, 2, 1, 5), (2, 2, 5, 1)]:
        maps = torch.randn(*shape, generator=generator, dtype=torch.float64) * 3 - 1
        ours = certainty(maps, "row")
        assert ours.dtype == torch.float64
        assert np.abs(ours.numpy() - authors_certainty(maps.numpy())).max() < 1e-12
    # the method's certainties are read with its option, the authors' by default
    method = toy_avsl().eval()
    _, maps = method.forward_levels(toy_batch().images)
    reference = [torch.from_numpy(authors_certainty(m.double().numpy())) for m in maps[1:]]
    for ours, theirs in zip(method.certainties(maps), reference, strict=True):
        assert torch.allclose(ours.double(), theirs, atol=1e-6)
    method.options["certainty_min"] = "global"
    assert not torch.allclose(method.certainties(maps)[0].double(), reference[0], atol=1e-3)


def test_the_certainty_formula_is_an_option_that_runs_record_and_fingerprints_cover():
    assert resolve_config("avsl", "bench").loss["certainty_min"] == "row"
    assert resolve_config("avsl", "bench", overrides=["loss.certainty_min=global"]).loss["certainty_min"] == \
        "global"
    with pytest.raises(OptionError) as err:
        resolve_config("avsl", "bench", overrides=["loss.certainty_min=column"])
    assert "one of: row, global" in err.value.render()
    row, old = toy_avsl(), toy_avsl(certainty_min="global")
    device = torch.device("cpu")
    assert MethodModel(row, device).fingerprint() != MethodModel(old, device).fingerprint()
    # a global model's fingerprint is its weights' digest, as it was before the option was a plain default
    assert MethodModel(old, device).fingerprint() == weights_sha256(old)
    listed = CliRunner().invoke(main, ["methods"])
    assert listed.exit_code == 0 and "certainty_min='row' (one of: row, global)" in listed.output


def test_batch_edges_pool_the_low_maps_to_the_high_level_s_size():
    generator = torch.Generator().manual_seed(4)
    low, high = torch.rand(3, 5, 4, 4, generator=generator), torch.rand(3, 6, 2, 2, generator=generator)
    edges = batch_edges(low, high)
    assert edges.shape == (5, 6)
    pooled = F.normalize(F.avg_pool2d(low, 2).flatten(2), dim=2)
    expected = (pooled[:, 1] * F.normalize(high.flatten(2), dim=2)[:, 3]).sum(dim=1).mean()
    assert edges[1, 3] == pytest.approx(expected.item(), abs=1e-6)


# ----------------------------------------------------------------------------------------------- ranking
def test_chunked_ranking_equals_the_full_matrix(monkeypatch):
    method = toy_avsl()
    method.train().loss(toy_batch())
    method.eval()
    images = torch.rand(11, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        state = method.embed(images)
        full = method.pairwise_distance(state, state)
    monkeypatch.setattr(avsl_method, "NODE_ELEMENTS", 3 * DIM)  # three pairs per block inside the call
    with torch.no_grad():
        chunked = method.pairwise_distance(state, state)
    assert torch.allclose(chunked, full, atol=1e-6)
    k = 5
    expected = full.fill_diagonal_(float("inf")).argsort(dim=1)[:, :k].numpy()
    found = LearnedDistance(method.pairwise_distance, query_rows=3, reference_rows=4).neighbours(state, k)
    assert (found == expected).all()
    retrieval = method.retrieval()
    assert isinstance(retrieval, LearnedDistance) and retrieval.shortlist_key == "embedding"
    assert retrieval.query_rows * retrieval.reference_rows * DIM <= 1 << 24  # a block's node tensor: 64 MiB


def test_an_eval_state_does_not_depend_on_the_batch():
    method = toy_avsl().double().eval()
    images = toy_batch().images.double()
    with torch.no_grad():
        alone = [method.embed(images[i : i + 1]) for i in range(len(images))]
        for seed in range(2):
            order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
            others = torch.rand(5, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(10 + seed)).double()
            inside = method.embed(torch.cat([images[order], others]))
            for name in ("embedding", "certainty"):
                expected = torch.cat([alone[i][name] for i in order.tolist()])
                assert torch.allclose(inside[name][: len(images)], expected, atol=1e-10)
    assert alone[0]["embedding"].shape == (1, 3 * DIM) and alone[0]["certainty"].shape == (1, 2 * DIM)
    for level in alone[0]["embedding"].split(DIM, dim=1):
        assert level.norm().item() == pytest.approx(1.0, abs=1e-9)


def test_the_distance_is_differentiable_with_respect_to_the_state():
    method = toy_avsl().eval()
    embedded = method.embed(toy_batch().images)
    state = {name: value.detach().requires_grad_(True) for name, value in embedded.items()}
    method.pairwise_distance({k: v[:2] for k, v in state.items()}, state).sum().backward()
    assert state["embedding"].grad.abs().sum() > 0 and state["certainty"].grad.abs().sum() > 0


# ------------------------------------------------------------------------------------- gradient routing
@pytest.mark.parametrize("base", ["proxy_anchor", "margin"])
def test_the_final_loss_trains_only_the_reliability_parameters(base):
    method = toy_avsl(base=base).train()
    method.loss_terms(toy_batch())["final_loss"].backward()
    collector = method.collector
    reliability_ids = {id(p) for p in [*collector.slope, *collector.bias]}
    own = {id(collector.boundaries[3])} if base == "margin" else set()  # the final loss's own boundaries
    for name, parameter in method.named_parameters():
        if id(parameter) in reliability_ids:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        elif id(parameter) not in own:
            assert parameter.grad is None or not parameter.grad.any(), name


@pytest.mark.parametrize("base", ["proxy_anchor", "margin"])
def test_the_level_losses_never_reach_the_reliability_parameters(base):
    method = toy_avsl(base=base).train()
    terms = method.loss_terms(toy_batch())
    sum(terms[f"level{i}_loss"] for i in (1, 2, 3)).backward()
    assert all(p.grad is None for p in [*method.collector.slope, *method.collector.bias])
    for module in (method.backbone, method.embedder):
        trained = [p for p in module.parameters() if p.requires_grad]
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in trained)
    parameters = method.collector.proxies if base == "proxy_anchor" else method.collector.boundaries[:3]
    assert all(p.grad is not None for p in parameters)


# ------------------------------------------------------------------------------------------------- edges
def test_the_edges_are_copied_from_the_first_batch_and_then_approach_a_repeated_one_geometrically():
    method = toy_avsl().train()
    first, repeated = toy_batch(seed=1), toy_batch(seed=2)

    def batch_estimates(batch):
        with torch.no_grad():
            _, maps = method.forward_levels(batch.images)
        return [batch_edges(low, high) for low, high in itertools.pairwise(maps)]

    in_training = method.loss(first)["final_loss"]
    start = batch_estimates(first)
    assert all(torch.equal(e, s) for e, s in zip(method.collector.edges(), start, strict=True))
    target = batch_estimates(repeated)
    assert (start[0] - target[0]).abs().max() > 1e-3  # not vacuous: the two batches differ
    for step in range(1, 6):
        method.loss(repeated)
        for edges, s, t in zip(method.collector.edges(), start, target, strict=True):
            assert torch.allclose(edges - t, 0.5**step * (s - t), atol=1e-6)
    assert method.collector.edge_updates.item() == 6
    before = [e.clone() for e in method.collector.edges()]
    method.eval().loss(first)  # an eval forward leaves them alone
    assert all(torch.equal(a, b) for a, b in zip(before, method.collector.edges(), strict=True))
    # the first batch's loss was computed with the edges it had just set (updated before its distances)
    again = toy_avsl()
    again.train().loss(first)
    assert torch.equal(again.eval().loss(first)["final_loss"], in_training)
    assert not torch.equal(toy_avsl().eval().loss(first)["final_loss"], in_training)  # edges matter


def test_the_edges_are_saved_with_the_model_and_load_with_the_safe_loader():
    method = toy_avsl()
    method.train().loss(toy_batch())
    buffer = io.BytesIO()
    torch.save(method.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert {"collector.edges_0", "collector.edges_1", "collector.edge_updates"} <= set(state)
    fresh = toy_avsl()
    fresh.load_state_dict(state)
    assert fresh.collector.edge_updates.item() == 1
    method.eval(), fresh.eval()
    with torch.no_grad():
        images = toy_batch(seed=3).images
        a = method.pairwise_distance(method.embed(images), method.embed(images))
        b = fresh.pairwise_distance(fresh.embed(images), fresh.embed(images))
        unloaded = toy_avsl().eval()
        c = unloaded.pairwise_distance(unloaded.embed(images), unloaded.embed(images))
    assert torch.equal(a, b) and not torch.allclose(a, c)


# ------------------------------------------------------------------------------------------------ losses
def test_proxy_anchor_in_dissimilarity_form_equals_the_cosine_proxy_anchor():
    from pytorch_metric_learning import losses

    generator = torch.Generator().manual_seed(6)
    embeddings = F.normalize(torch.randn(12, 8, generator=generator), dim=1)
    labels = torch.randint(0, 5, (12,), generator=generator)
    reference = losses.ProxyAnchorLoss(5, 8, margin=0.1, alpha=32)
    proxies = F.normalize(reference.proxies.detach(), dim=1)
    distances = torch.cdist(embeddings, proxies) ** 2
    ours = proxy_anchor_loss(distances, labels, torch.arange(5), alpha=16, pos_margin=1.8, neg_margin=2.2)
    assert ours.item() == pytest.approx(reference(embeddings, labels).item(), rel=1e-5)


def test_hard_triplets_pick_a_random_other_positive_and_the_first_nearest_negative_beyond_the_cutoff():
    labels = torch.tensor([0, 0, 0, 1, 1, 2])
    d = torch.tensor([
        [0.0, 0.2, 0.3, 0.9, 0.7, 0.8],
        [0.2, 0.0, 0.1, 0.6, 0.9, 0.4],
        [0.3, 0.1, 0.0, 0.05, 0.02, 0.8],
        [0.9, 0.6, 0.05, 0.0, 0.4, 0.9],
        [0.7, 0.9, 0.02, 0.4, 0.0, 0.6],
        [0.8, 0.4, 0.8, 0.9, 0.6, 0.0],
    ])
    anchors, positives, negatives = hard_triplets(d, labels, 0.5, torch.Generator().manual_seed(0))
    assert anchors.tolist() == [0, 1, 2, 3, 4]  # image 5 has no positive
    assert all(labels[a] == labels[p] and a != p for a, p in zip(anchors, positives, strict=True))
    # the clamp is min(0.4, 0.5) = 0.4: anchor 0's nearest negative is 4 (0.7); anchor 1's is 5 (0.4)
    assert negatives[0] == 4 and negatives[1] == 5
    # anchor 2's negatives 4 and 3 are both nearer than the clamp, so tied: the first in batch order is
    # taken (the authors' selector's argmin), whatever the generator
    drawn = {hard_triplets(d, labels, 0.5, torch.Generator().manual_seed(s))[2][2].item() for s in range(20)}
    assert drawn == {3}


def test_the_margin_loss_is_zero_not_nan_when_no_term_is_active():
    labels = torch.tensor([0, 0, 1, 1])
    boundaries = torch.full((2,), 1.2, requires_grad=True)
    far = torch.tensor([[0.0, 0.1, 3.0, 3.0], [0.1, 0.0, 3.0, 3.0], [3.0, 3.0, 0.0, 0.1],
                        [3.0, 3.0, 0.1, 0.0]], requires_grad=True)
    loss = margin_loss(far, labels, boundaries, hard_triplets(far, labels, 0.5), margin=0.2)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.isfinite(far.grad).all() and torch.isfinite(boundaries.grad).all()
    near = (far.detach() * 0.0 + 0.5).fill_diagonal_(0.0)
    active = margin_loss(near, labels, boundaries, hard_triplets(near, labels, 0.5), margin=0.2)
    assert active.item() == pytest.approx(0.9)  # only the negative terms (1.4 − 0.5) are active


def test_above_a_thousand_classes_only_the_batch_s_classes_proxies_are_used():
    labels = torch.tensor([3, 3, 3, 3, 700, 700, 700, 700, 1000, 1000, 1000, 1000])
    many = toy_avsl(num_classes=1001).train()
    many.loss(toy_batch(labels=labels))["loss"].backward()
    grads = many.collector.proxies[0].grad
    used = grads.abs().sum(dim=1) > 0
    assert used.nonzero().flatten().tolist() == [3, 700, 1000]
    few = toy_avsl(num_classes=1000).train()
    few.loss(toy_batch(labels=labels.clamp_max(999)))["loss"].backward()
    assert (few.collector.proxies[0].grad.abs().sum(dim=1) > 0).all()  # every proxy is a negative


# ----------------------------------------------------------------------------------------------- options
def test_an_unknown_base_loss_is_refused_at_configuration_time_naming_the_choices():
    with pytest.raises(OptionError, match="proxy_anchor, margin"):
        resolve_config("avsl", "folder", overrides=["loss.base=triplet"])


def test_a_top_k_above_the_embedding_size_is_refused_with_the_fix():
    with pytest.raises(OptionError) as err:
        resolve_config("avsl", "bench", overrides=["loss.top_k=129"])
    assert "top_k" in err.value.problem and "at most 128" in err.value.fix
    assert resolve_config("avsl", "bench", overrides=["loss.top_k=128"]).loss["top_k"] == 128
    with pytest.raises(OptionError, match="top_k"):
        toy_avsl(top_k=DIM + 1)


@pytest.mark.parametrize(
    ("override", "words"),
    [("loss.level_weights=[1, 2]", "a list of 3"), ("loss.level_weights=[1, -1, 1]", "0 or more"),
     ("loss.edge_momentum=1.5", "in [0, 1]"), ("loss.top_k=0", "at least 1"),
     ("loss.reliability_gain=0", "positive"), ("loss.top_k=2.5", "an integer")],
)
def test_bad_option_values_are_refused(override, words):
    with pytest.raises(OptionError) as err:
        resolve_config("avsl", "bench", overrides=[override])
    assert words in err.value.render()


def test_the_default_top_k_is_a_quarter_of_the_embedding_size():
    assert toy_avsl().top_k == DIM // 4
    assert resolve_config("avsl", "bench").loss["top_k"] is None and default_top_k(128) == 32
    assert toy_avsl(top_k=7).top_k == 7


# ---------------------------------------------------------------------------------------------------- run
@pytest.mark.slow
def test_an_avsl_run_records_every_loss_term_and_keeps_its_edges(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "avsl", epochs=1)
    result = train(config, run_dir=tmp_path / "avsl", progress=False, echo=False)
    row = result.history[1]
    for name in ("loss", "level1_loss", "level2_loss", "level3_loss", "final_loss", "reliability2",
                 "reliability3"):
        assert f"train_{name}" in row
    assert '"train_level2_loss"' in result.run.metrics_jsonl.read_text()
    model = load_checkpoint(result.run.last)["model"]
    assert model["collector.edge_updates"].item() >= 1 and model["collector.edges_1"].abs().sum() > 0
    trained = load_trained(result.run.root, checkpoint="last", device="cpu")
    assert torch.equal(trained.method.collector.edges_0, model["collector.edges_0"])


@pytest.mark.parametrize("dataset", ["cub", "cars", "sop", "folder", "bench"])
def test_every_configuration_clips_each_group_on_the_first_step_alone_as_the_authors_clipper_does(dataset):
    optim = resolve_config("avsl", dataset).optim
    assert (optim.grad_clip, optim.grad_clip_per_group, optim.grad_clip_first_step_only) == (10.0, True, True)


@pytest.mark.slow
def test_a_run_that_does_not_name_the_certainty_option_is_read_with_today_s_default(tiny_bench, tmp_path):
    """No value reproduces runs of pre-release versions: an option a run does not name takes its default."""
    result = train(tiny_config(tiny_bench, "avsl", epochs=1), run_dir=tmp_path / "avsl", progress=False,
                   echo=False)
    data = json.loads(result.run.config.read_text(encoding="utf-8"))
    del data["loss"]["certainty_min"]
    result.run.config.write_text(json.dumps(data), encoding="utf-8")
    for path in (result.run.best, result.run.last):
        state = load_checkpoint(path)
        del state["spec"]["options"]["certainty_min"]
        save_checkpoint(path, state)
    assert "certainty_min" not in load_run_config(result.run.config).loss
    trained = load_trained(result.run.root, device="cpu")
    assert trained.method.options["certainty_min"] == "row"
    assert trained.fingerprint() != weights_sha256(trained.method)


def test_pair_blocks_fit_a_cpus_caches_and_fill_a_gpu():
    """A CPU ranks in blocks small enough to stay in its caches, a GPU in large ones; both bounded."""
    cpu, gpu = avsl_method.block_shape(torch.device("cpu")), avsl_method.block_shape(torch.device("cuda"))
    assert cpu == (avsl_method.CPU_NODE_ELEMENTS, avsl_method.CPU_REFERENCE_ROWS)
    assert gpu == (avsl_method.NODE_ELEMENTS, avsl_method.REFERENCE_ROWS)
    assert cpu[0] * 4 <= 4 << 20 < gpu[0] * 4
