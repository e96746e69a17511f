"""MetricFormer's self-tests (docs/methods/metricformer.md, *Self-tests*): the feature decoupling block, the
eval embedding's batch independence, the blocks' permutation equivariance, the consistency and diversity
losses, a toy run, the options and a recorded run."""

from __future__ import annotations

import pytest
import torch

from bgbias.engine.config import resolve_config
from bgbias.engine.training import train
from bgbias.errors import OptionError
from bgbias.methods.base import Batch, MethodSpec
from bgbias.methods.metricformer.blocks import CorrelationBlock, attention_entropy, neighbour_graph
from bgbias.methods.metricformer.losses import consistency_loss, diversity_loss
from bgbias.methods.metricformer.method import MetricFormer
from bgbias.models.registry import build_backbone
from tests.calibration import calibrate_batchnorm
from tests.conftest import tiny_config

CLASSES, PER_CLASS, SIDE, DIM = 3, 4, 32, 16


def toy_metricformer(**options) -> MetricFormer:
    torch.manual_seed(0)
    defaults = resolve_config("metricformer", "folder").loss
    spec = MethodSpec(DIM, CLASSES, 1000, options={**defaults, **options}, input_size=SIDE)
    return calibrate_batchnorm(MetricFormer(build_backbone("tiny_cnn", pretrained=False), spec))


def toy_batch(seed: int = 1) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(CLASSES * PER_CLASS, 3, SIDE, SIDE, generator=generator)
    labels = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    return Batch(images, labels, torch.arange(CLASSES * PER_CLASS))


def corrupted_style(images: torch.Tensor, seed: int) -> torch.Tensor:
    """The images' centre kept and the rest replaced by another random 'background', as a corrupted test
    image keeps its object and changes what surrounds it."""
    background = torch.rand(images.shape, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(1, 1, SIDE, SIDE)
    mask[..., 8:24, 8:24] = 1
    return images * mask + background * (1 - mask)


# ----------------------------------------------------------------------------------- feature decoupling
def test_fdb_attention_is_a_softmax_over_positions_and_gives_k_sub_features():
    method = toy_metricformer().eval()
    with torch.no_grad():
        features = method.backbone(toy_batch().images)[method.backbone.final]
        attention, _ = method.fdb.attention(features)
        z0 = method.fdb(features)
    b, _, h, w = features.shape
    assert attention.shape == (b, method.slots, h * w)
    assert torch.allclose(attention.sum(dim=-1), torch.ones(b, method.slots), atol=1e-6)
    assert (attention >= 0).all()
    assert z0.shape == (b, method.slots, DIM // method.slots)


def test_attention_entropy_is_one_for_an_even_spread_and_zero_for_a_single_position():
    even = torch.full((2, 3, 16), 1 / 16)
    single = torch.zeros(2, 3, 16)
    single[..., 5] = 1
    half = torch.zeros(2, 3, 16)
    half[..., :2] = 0.5  # two positions of 16: log 2 / log 16
    assert attention_entropy(even).item() == pytest.approx(1.0)
    assert attention_entropy(single).item() == pytest.approx(0.0, abs=1e-6)
    assert attention_entropy(half).item() == pytest.approx(0.25)


# ------------------------------------------------------------------------------------ batch independence
@pytest.mark.parametrize("style", ["clean", "corrupted"])
def test_an_eval_embedding_alone_equals_the_same_image_s_inside_any_batch(style):
    method = toy_metricformer().double().eval()
    images = toy_batch().images.double()
    if style == "corrupted":
        images = corrupted_style(images, seed=5).double()
    with torch.no_grad():
        alone = torch.cat([method.embed(images[i : i + 1]) for i in range(len(images))])
        for seed in range(3):
            order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
            others = torch.rand(5, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(10 + seed)).double()
            inside = method.embed(torch.cat([images[order], others]))[: len(images)]
            assert torch.allclose(inside, alone[order], atol=1e-6)
    assert torch.allclose(alone.norm(dim=1), torch.ones(len(images), dtype=alone.dtype), atol=1e-6)


def test_the_batch_wise_path_does_depend_on_the_batch():
    """Not vacuous: the training path with the BCBs changes with the company an image keeps."""
    method = toy_metricformer().eval()
    images = toy_batch().images
    with torch.no_grad():
        z0 = method.subfeatures(images)
        first = method.head(z0, batch_wise=True)[:4]
        z1 = method.subfeatures(torch.cat([images[:4], torch.rand(8, 3, SIDE, SIDE)]))
        second = method.head(z1, batch_wise=True)[:4]
    assert (first - second).abs().max() > 1e-4


# ------------------------------------------------------------------------------------------ equivariance
def test_bcb_is_permutation_equivariant_over_the_batch():
    torch.manual_seed(0)
    block = CorrelationBlock(8, 4, batch_wise=True, neighbours=3).double().eval()
    tokens = torch.randn(10, 3, 8, dtype=torch.double)
    permutation = torch.randperm(10)
    with torch.no_grad():
        assert torch.allclose(block(tokens)[permutation], block(tokens[permutation]), atol=1e-10)


def test_fcb_is_permutation_equivariant_over_the_slots():
    torch.manual_seed(0)
    block = CorrelationBlock(8, 4, batch_wise=False).double().eval()
    tokens = torch.randn(6, 4, 8, dtype=torch.double)
    permutation = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        assert torch.allclose(block(tokens)[:, permutation], block(tokens[:, permutation]), atol=1e-10)


def test_the_neighbour_graph_keeps_the_top_n_including_self_above_epsilon():
    tokens = torch.randn(7, 2, 4, generator=torch.Generator().manual_seed(0))
    graph = neighbour_graph(tokens, 3, -1.0)
    assert ((graph != 0).sum(dim=1) == 3).all()
    assert torch.allclose(graph.diagonal(), torch.ones(7))
    assert (neighbour_graph(tokens, 3, 1.5) == 0).all()


# ------------------------------------------------------------------------------------------- consistency
@pytest.mark.slow
@pytest.mark.parametrize("options", [{"epsilon": 1.5}, {"blocks": 0}], ids=["empty-graph", "no-bcb"])
def test_with_an_empty_graph_or_no_batch_wise_block_the_consistency_loss_is_zero(options):
    method = toy_metricformer(**options).train()
    terms = method.loss(toy_batch())
    assert terms["consistency_loss"].item() == pytest.approx(0.0, abs=1e-12)
    assert toy_metricformer().train().loss(toy_batch())["consistency_loss"] > 1e-6  # not vacuous


def test_the_teacher_consistency_moves_only_the_plain_path():
    plain = torch.randn(4, 6, requires_grad=True)
    with_batch = torch.randn(4, 6, requires_grad=True)
    consistency_loss(with_batch, plain, teacher=True).backward()
    assert with_batch.grad is None and plain.grad.abs().sum() > 0


# --------------------------------------------------------------------------------------------- diversity
def test_diversity_drops_when_sub_features_are_orthogonalised_and_vanishes_well_below_the_margin():
    generator = torch.Generator().manual_seed(0)
    common = torch.randn(5, 1, 8, generator=generator)
    alike = common + 0.1 * torch.randn(5, 3, 8, generator=generator)
    orthogonal = torch.linalg.qr(alike.transpose(1, 2)).Q.transpose(1, 2)  # same span, pairwise orthogonal
    assert diversity_loss(orthogonal, 10.0, 0.0) < diversity_loss(alike, 10.0, 0.0)
    # cosines of −1/2 (three vectors 120° apart) are far below a margin of 0.5: the loss is near 0
    angles = torch.tensor([0.0, 2.0944, 4.1888])
    spread = torch.stack([angles.cos(), angles.sin()], dim=-1).expand(5, 3, 2)
    assert diversity_loss(spread, 10.0, 0.5) < 1e-4


# --------------------------------------------------------------------------------------------- toy run
@pytest.mark.slow
@pytest.mark.parametrize("base", ["margin", "proxy_anchor"])
def test_a_toy_run_lowers_every_loss_term_and_the_attention_maps_differ(base):
    method = toy_metricformer(base=base).train()
    generator = torch.Generator().manual_seed(3)
    colours = torch.rand(CLASSES, 3, 1, 1, generator=generator)
    optimiser = torch.optim.Adam(method.parameters(), lr=3e-3)
    history = []
    for step in range(60):
        noise = 0.3 * torch.rand(CLASSES * PER_CLASS, 3, SIDE, SIDE, generator=generator)
        labels = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
        images = (0.7 * colours[labels] + noise).clamp(0, 1)
        terms = method.loss(Batch(images, labels, torch.arange(len(labels)) + step))
        optimiser.zero_grad()
        terms["loss"].backward()
        optimiser.step()
        history.append({name: float(value.detach()) for name, value in terms.items()})
    for name in ("loss", "slot_loss", "plain_loss", "batch_loss", "diversity_loss"):
        first = sum(row[name] for row in history[:10]) / 10
        last = sum(row[name] for row in history[-10:]) / 10
        assert last < first, f"{name}: {first:.4f} → {last:.4f}"
    method.eval()
    with torch.no_grad():
        attention, _ = method.fdb.attention(method.backbone(images)[method.backbone.final])
    for i in range(method.slots):
        for j in range(i + 1, method.slots):
            assert (attention[:, i] - attention[:, j]).abs().sum(dim=-1).min() > 1e-3


# ----------------------------------------------------------------------------------------------- options
def test_an_unknown_base_loss_is_refused_at_configuration_time_naming_the_choices():
    with pytest.raises(OptionError, match="margin, proxy_anchor"):
        resolve_config("metricformer", "folder", overrides=["loss.base=triplet"])


def test_a_batch_smaller_than_n_is_refused_before_training(tiny_bench):
    with pytest.raises(OptionError, match="neighbours"):
        tiny_config(tiny_bench, "metricformer", "loss.neighbours=9")
    method = toy_metricformer(neighbours=CLASSES * PER_CLASS + 1).train()
    with pytest.raises(OptionError, match="neighbours"):
        method.loss(toy_batch())


def test_an_embedding_size_that_k_does_not_divide_is_refused():
    with pytest.raises(OptionError, match="multiple"):
        resolve_config("metricformer", "folder", overrides=["loss.k=3", "model.embedding_dim=128"])
    config = resolve_config("metricformer", "folder", overrides=["loss.k=3", "model.embedding_dim=126"])
    assert config.loss["k"] == 3


def test_every_parameter_group_trains_with_proxy_anchor():
    method = toy_metricformer(base="proxy_anchor").train()
    method.loss(toy_batch())["loss"].backward()
    groups = method.parameter_groups()
    assert len(groups["loss"]) == method.slots + 1  # proxies per slot and for the embedding
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for group in groups.values() for p in group)


# ------------------------------------------------------------------------------------------------- run
@pytest.mark.slow
def test_a_metricformer_run_records_its_loss_terms(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "metricformer", epochs=1)
    result = train(config, run_dir=tmp_path / "metricformer", progress=False, echo=False)
    row = result.history[1]
    for name in ("loss", "slot_loss", "plain_loss", "batch_loss", "diversity_loss", "consistency_loss",
                 "attention_entropy"):
        assert f"train_{name}" in row
    assert 0 < row["train_attention_entropy"] <= 1
