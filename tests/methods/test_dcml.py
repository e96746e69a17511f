"""DCML's self-tests (docs/methods/dcml.md, *Self-tests*) and its pieces: attention copies, penalties,
environment learner."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

from bgbias.cli import main
from bgbias.engine.config import config_from_dict, resolve_config
from bgbias.engine.training_build import build_optimizer
from bgbias.errors import OptionError
from bgbias.methods.base import Batch, MethodSpec
from bgbias.methods.dcml.attention import AttentionCopies, attend
from bgbias.methods.dcml.environments import learn_environments
from bgbias.methods.dcml.method import DCML
from bgbias.methods.dcml.penalties import (
    compactness,
    dummy_penalties,
    environment_loss,
    logit_scale_penalty,
    pair_compactness,
)
from bgbias.methods.dcml.proxies import CosFaceProxies
from bgbias.models.backbone import Backbone
from bgbias.models.registry import build_backbone

CLASSES, PER_CLASS, SIDE, DIM = 3, 4, 16, 8


def toy_backbone() -> Backbone:
    """The registered test backbone (tiny_cnn): 16-px images → 32 channels on a 4×4 map (the spatial gate
    has 16 cells)."""
    return build_backbone("tiny_cnn", pretrained=False)


def toy_dcml(**options) -> DCML:
    torch.manual_seed(0)
    spec = MethodSpec(DIM, CLASSES, CLASSES * PER_CLASS, options={"scale": 16.0, "margin": 0.2, **options},
                      input_size=SIDE)
    return DCML(toy_backbone(), spec)


def toy_batch(seed: int = 1) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(CLASSES * PER_CLASS, 3, SIDE, SIDE, generator=generator)
    labels = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    return Batch(images, labels, torch.arange(CLASSES * PER_CLASS))


def linear_net(weights) -> tuple[nn.Module, ...]:
    """The four gate layers as plain bias-free nn.Linear modules holding ``weights``."""
    layers = []
    for weight in weights:
        layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        layer.weight.data.copy_(weight)
        layers.append(layer)
    return tuple(layers)


def reference_attention(feature_map, layers):
    """The attention net of docs/methods/dcml.md step by step, with nn.Linear layers: spatial gate, then
    channel gate."""
    spatial_in, spatial_out, channel_in, channel_out = layers
    b, c, h, w = feature_map.shape
    spatial = torch.sigmoid(spatial_out(torch.relu(spatial_in(feature_map.mean(1).reshape(b, h * w)))))
    gated = feature_map * spatial.reshape(b, 1, h, w)
    channel = torch.sigmoid(channel_out(torch.relu(channel_in(gated.mean((2, 3))))))
    return gated * channel.reshape(b, c, 1, 1)


# ------------------------------------------------------------------------------------------- attention
def test_attention_shapes_and_gate_ranges():
    copies = AttentionCopies(2, 1024, 7, 7)
    feature_map = torch.rand(3, 1024, 7, 7)
    attended, spatial, channel = attend(feature_map, copies.weights(0))
    assert attended.shape == feature_map.shape
    assert spatial.shape == (3, 1, 7, 7) and channel.shape == (3, 1024, 1, 1)
    for gate in (spatial, channel):
        assert gate.min() > 0 and gate.max() < 1
    assert copies.channel_in.shape == (2, 512, 1024) and copies.spatial_in.shape == (2, 49, 49)


def test_copies_are_initialised_apart_and_spread_is_zero_when_equal():
    copies = AttentionCopies(3, 12, 4, 4)
    assert not torch.equal(copies.spatial_in[0], copies.spatial_in[1])
    assert copies.spread() > 0
    with torch.no_grad():
        for parameter in copies.parameters():
            parameter[:] = parameter[0]
    assert copies.spread() < 1e-12  # the mean of equal floats need not equal them to the last bit


def test_equal_copies_make_the_mean_weight_net_equal_every_copy():
    method = toy_dcml(environments=3)
    with torch.no_grad():
        for parameter in method.attention.parameters():
            parameter[:] = parameter[1]
    feature_map = torch.rand(5, 32, 4, 4)
    mean_output = method.attention(feature_map)
    for j in range(3):
        assert torch.allclose(mean_output, method.attention(feature_map, j), atol=1e-6)


def test_inference_uses_the_mean_of_the_weights_not_of_the_outputs():
    method = toy_dcml(environments=2).eval()
    copies = method.attention
    averaged = [w.mean(0) for w in copies.stacked]
    images = toy_batch().images
    with torch.no_grad():
        feature_map = method.backbone(images)["final"]
        expected = F.normalize(method.head(reference_attention(feature_map, linear_net(averaged))), dim=1)
        output_mean = sum(copies(feature_map, j) for j in range(2)) / 2
        assert torch.allclose(method.embed(images), expected, atol=1e-6)
        assert not torch.allclose(copies(feature_map), output_mean, atol=1e-4)


def test_maps_of_another_size_are_gated_through_the_trained_grid():
    copies = AttentionCopies(1, 12, 4, 4)
    large = torch.rand(2, 12, 8, 8)
    attended, spatial, _ = attend(large, copies.weights(0), (4, 4))
    assert attended.shape == large.shape and spatial.shape == (2, 1, 8, 8)
    pooled = F.avg_pool2d(large, 2)  # its channel mean on the 4×4 grid is the grid's input
    _, on_grid, _ = attend(pooled, copies.weights(0))
    expected = F.interpolate(on_grid, size=(8, 8), mode="bilinear", align_corners=False)
    assert torch.allclose(spatial, expected, atol=1e-6)
    method = toy_dcml().eval()
    assert method.embed(torch.rand(1, 3, 2 * SIDE, 2 * SIDE)).shape == (1, DIM)


# -------------------------------------------------------------------------------------------- losses
def test_cosface_logits_give_pytorch_metric_learnings_cosface_loss():
    from pytorch_metric_learning.losses import CosFaceLoss

    proxies = CosFaceProxies(5, DIM, scale=30.0, margin=0.3)
    embeddings, labels = torch.randn(10, DIM), torch.randint(0, 5, (10,))
    reference = CosFaceLoss(num_classes=5, embedding_size=DIM, margin=0.3, scale=30.0)
    reference.W.data.copy_(proxies.weight.data.T)
    ours = F.cross_entropy(proxies(embeddings, labels), labels)
    assert torch.allclose(ours, reference(embeddings, labels), atol=1e-5)


def test_one_environment_without_regularisers_is_cosface():
    method = toy_dcml(environments=1, alpha=0.0, beta=0.0, gamma=0.0).train()
    batch = toy_batch()
    terms = method.loss(batch)
    feature_map = method.backbone(batch.images)["final"]
    z = method.head(method.attention(feature_map, 0))
    cosface = F.cross_entropy(method.proxies(z, batch.labels), batch.labels)
    assert torch.allclose(terms["invariant"], cosface, atol=1e-5)
    assert torch.allclose(terms["loss"], terms["invariant"] + terms["erm"])


def finite_difference_gradient(function, point: torch.Tensor, step: float = 1e-5) -> torch.Tensor:
    gradient = torch.zeros_like(point)
    for i in range(point.numel()):
        offset = torch.zeros_like(point).view(-1)
        offset[i] = step
        offset = offset.view_as(point)
        gradient.view(-1)[i] = (function(point + offset) - function(point - offset)) / (2 * step)
    return gradient


def test_irm_penalty_is_the_squared_gradient_at_the_dummy_scale():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 5, generator=generator, dtype=torch.float64) * 3
    labels = torch.randint(0, 5, (8,), generator=generator)
    weights = torch.rand(8, generator=generator, dtype=torch.float64)
    penalty = logit_scale_penalty(logits, labels, weights)
    numeric = finite_difference_gradient(
        lambda v: environment_loss(logits * v, labels, weights), torch.ones(1, 5, dtype=torch.float64)
    )
    assert penalty >= 0
    assert torch.allclose(penalty, (numeric**2).sum(), rtol=1e-6)


def test_dummy_attention_penalty_is_the_squared_gradient_at_the_dummy_maps():
    generator = torch.Generator().manual_seed(0)
    attended = torch.rand(6, 4, 3, 3, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 3, (6,), generator=generator)
    weights = torch.rand(6, generator=generator, dtype=torch.float64)
    projection = torch.randn(4, 3, generator=generator, dtype=torch.float64)

    def classify(feature_map):
        return 5 * feature_map.mean((2, 3)) @ projection

    scale_penalty, attention_penalty = dummy_penalties(attended, classify, labels, weights)

    def loss_of(spatial=None, channel=None):
        spatial = torch.ones(1, 1, 3, 3, dtype=torch.float64) if spatial is None else spatial
        channel = torch.ones(1, 4, 1, 1, dtype=torch.float64) if channel is None else channel
        return environment_loss(classify(attended * spatial * channel), labels, weights)

    ones = {"dtype": torch.float64}
    spatial = finite_difference_gradient(lambda u: loss_of(spatial=u), torch.ones(1, 1, 3, 3, **ones))
    channel = finite_difference_gradient(lambda u: loss_of(channel=u), torch.ones(1, 4, 1, 1, **ones))
    assert torch.allclose(attention_penalty, (spatial**2).sum() + (channel**2).sum(), rtol=1e-6)
    assert torch.allclose(scale_penalty, logit_scale_penalty(classify(attended), labels, weights))


def test_irm_penalty_reaches_the_backbone():
    method = toy_dcml().train()
    method.env_logits.normal_(generator=torch.Generator().manual_seed(0))
    terms = method.loss(toy_batch())
    assert terms["irm_penalty"] > 0
    terms["irm_penalty"].backward()
    grads = [p.grad for p in method.backbone.parameters()]
    assert all(g is not None for g in grads) and sum(g.abs().sum() for g in grads) > 0


def test_compactness_is_the_weighted_distance_to_detached_class_means():
    embeddings = torch.tensor([[0.0, 0.0], [2.0, 0.0], [5.0, 5.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 1])
    weights = torch.tensor([1.0, 3.0, 2.0])
    value = compactness(embeddings, labels, weights)
    assert math.isclose(float(value.detach()), (1 * 1.0 + 3 * 1.0 + 2 * 0.0) / 6, rel_tol=1e-6)
    value.backward()
    # Gradient 2 (z_i − mean) w_i / Σw: the class mean is held fixed.
    assert torch.allclose(embeddings.grad, torch.tensor([[-2 / 6, 0.0], [6 / 6, 0.0], [0.0, 0.0]]))


def test_pair_compactness_is_the_weighted_distance_to_the_fixed_partner():
    embeddings = torch.tensor([[0.0, 0.0], [1.0, 1.0]], requires_grad=True)
    partners = torch.tensor([[3.0, 4.0], [1.0, 2.0]], requires_grad=True)
    weights = torch.tensor([1.0, 3.0])
    value = pair_compactness(embeddings, partners, weights)
    assert math.isclose(float(value.detach()), (1 * 25.0 + 3 * 1.0) / 4, rel_tol=1e-6)
    value.backward()
    # Gradient 2 (z_i − p_i) w_i / Σw on the embeddings; none reaches the partners.
    assert torch.allclose(embeddings.grad, torch.tensor([[-6 / 4, -8 / 4], [0.0, -6 / 4]]))
    assert partners.grad is None


@pytest.mark.parametrize("part", [0, 1])
def test_paired_halves_take_every_term_on_one_half_with_gamma_to_the_partner(part):
    method = toy_dcml(paired_halves=True).train()
    method.env_logits.normal_(generator=torch.Generator().manual_seed(0))
    assert method.steps_per_batch == 2 and toy_dcml().steps_per_batch == 1
    batch = dataclasses.replace(toy_batch(), part=part)  # labels 0000 1111 2222: positions 2i, 2i+1 pair up
    terms = method.loss(batch)

    own, other = torch.arange(part, 12, 2), torch.arange(1 - part, 12, 2)
    labels, weights = batch.labels[own], method.env_logits[own].softmax(dim=1)
    feature_map = method.backbone(batch.images)["final"]
    env_ce, compact = [], []
    for j in range(2):
        z = method.head(method.attention(feature_map, j))  # the head sees the whole batch
        ce = F.cross_entropy(method.proxies(z[own], labels), labels, reduction="none")
        env_ce.append((ce * weights[:, j]).sum() / weights[:, j].sum())
        distance = ((z[own] - z[other]) ** 2).sum(dim=1)
        compact.append((distance * weights[:, j]).sum() / weights[:, j].sum())
    erm = F.cross_entropy(method.erm_proxies(method.head(method.erm_attention(feature_map[own], 0)), labels),
                          labels)
    assert torch.allclose(terms["env_ce"], torch.stack(env_ce).mean(), atol=1e-5)
    assert torch.allclose(terms["compactness"], torch.stack(compact).mean(), atol=1e-5)
    assert torch.allclose(terms["erm"], erm, atol=1e-5)


def test_paired_halves_refuse_batches_that_are_not_same_class_pairs():
    method = toy_dcml(paired_halves=True)
    mixed = toy_batch()
    mixed = dataclasses.replace(mixed, labels=torch.arange(CLASSES).repeat(PER_CLASS))  # 0 1 2 0 1 2 …
    with pytest.raises(OptionError, match="same-class pairs"):
        method.loss(mixed)
    with pytest.raises(OptionError, match="part 2"):
        method.loss(dataclasses.replace(toy_batch(), part=2))


@pytest.mark.slow
def test_loss_terms_are_finite_and_training_lowers_the_loss_on_two_toy_classes():
    method = toy_dcml(environments=2)
    method.env_logits.normal_(generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(3)
    # Two classes that differ in colour and texture, 4 noisy views each.
    base = torch.rand(2, 3, SIDE, SIDE, generator=generator)
    noise = 0.1 * torch.randn(8, 3, SIDE, SIDE, generator=generator)
    images = (base.repeat_interleave(4, 0) + noise).clamp(0, 1)
    batch = Batch(images, torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), torch.arange(8))
    optimizer = torch.optim.Adam(method.parameters(), lr=1e-3)
    method.train()
    losses = []
    for _ in range(30):
        terms = method.loss(batch)
        assert all(torch.isfinite(value) for value in terms.values())
        optimizer.zero_grad()
        terms["loss"].backward()
        optimizer.step()
        losses.append(float(terms["loss"].detach()))
    assert losses[-1] < 0.5 * losses[0]


# -------------------------------------------------------------------------------------- environments
class OneBatchData:
    """TrainingData's interface over one fixed batch: every pass is that batch."""

    def __init__(self, batch: Batch, num_samples: int):
        self.batch, self.num_samples, self.device = batch, num_samples, torch.device("cpu")
        self.passes: list[tuple[int, int, int]] = []

    def batches(self, *, stream, epoch, pass_index, batch_size, desc=""):
        self.passes.append((stream, epoch, pass_index))
        yield self.batch

    def generator(self, *, stream, epoch):
        return torch.Generator().manual_seed(stream + epoch)


def test_environment_learner_raises_its_objective_and_leaves_the_model_alone():
    method = toy_dcml().eval()
    before = {name: p.detach().clone() for name, p in method.named_parameters()}
    data = OneBatchData(toy_batch(), CLASSES * PER_CLASS)
    learned = learn_environments(method.environment_objective, data, epoch=1, environments=2, passes=12,
                                 lr=0.05, batch_size=12)
    objectives = learned.objectives
    assert all(b >= a - 1e-6 for a, b in itertools.pairwise(objectives)), objectives
    assert objectives[-1] > objectives[0]
    assert learned.best_pass == len(objectives) - 1
    assert all(p.grad is None for p in method.parameters())
    assert all(torch.equal(before[name], p) for name, p in method.named_parameters())
    weights = learned.logits.softmax(dim=1)
    assert torch.allclose(weights.sum(dim=1), torch.ones(len(weights)))
    assert [p[2] for p in data.passes] == list(range(12))


def test_environments_are_learned_before_epoch_1_and_every_e_epochs():
    method = toy_dcml(env_update_every=3, env_passes=2, env_batch_size=12)
    data = OneBatchData(toy_batch(), CLASSES * PER_CLASS)
    learned_at = []
    for epoch in range(1, 9):
        before = method.env_logits.clone()
        summary = method.on_epoch_start(epoch, data)
        if summary:
            learned_at.append(epoch)
            assert not torch.equal(before, method.env_logits)
            assert summary["env_passes"] == 2 and 0.5 <= summary["env_weight_max_mean"] <= 1
        else:
            assert torch.equal(before, method.env_logits)
    assert learned_at == [1, 4, 7]
    assert method.training  # the learner's eval mode is undone


def test_authors_single_pass_is_an_option():
    method = toy_dcml(env_passes=1, env_batch_size=12)
    summary = method.on_epoch_start(1, OneBatchData(toy_batch(), CLASSES * PER_CLASS))
    assert summary["env_passes"] == 1


# ------------------------------------------------------------------------------------------- options
def test_per_dataset_configurations_follow_the_specification():
    expected = {  # docs/methods/dcml.md, *Configurations*: scale, margin, α, β, γ, proxy lr, batch, m, epochs
        "cub": (100.0, 0.6182, 1e-4, 1e-2, 1e-1, 2.53e-3, 32, 4, 20),
        "cars": (161.5, 0.4324, 1e-5, 1e-2, 1e-4, 7.41e-3, 32, 4, 50),
        "sop": (100.0, 0.3364, 1e-4, 1e-2, 1e-6, 2.16e-3, 64, 2, 70),
    }
    for dataset, values in expected.items():
        config = resolve_config("dcml", dataset)
        loss = config.loss
        got = (loss["scale"], loss["margin"], loss["alpha"], loss["beta"], loss["gamma"],
               config.optim.lr_loss, config.data.batch_size, config.data.m_per_class, config.schedule.epochs)
        assert got == values, dataset
        assert (loss["environments"], loss["env_passes"], config.model.backbone) == (2, 5, "bninception")
        assert (config.optim.name, config.optim.lr_backbone, config.optim.lr_head) == ("rmsprop", 1e-6, 2e-6)
    assert resolve_config("dcml", "sop").loss["env_update_every"] == 10
    bench = resolve_config("dcml", "bench")
    cosface = resolve_config("cosface", "bench").loss
    assert (bench.loss["scale"], bench.loss["margin"]) == (cosface["scale"], cosface["margin"])


@pytest.mark.parametrize("dataset", ["cub", "cars", "sop"])
def test_the_head_s_batchnorm_trains_at_the_backbone_s_learning_rate_as_in_the_authors_code(dataset):
    """The authors' ``learner.py`` puts the head's BatchNorm in a group at ``lr_bone`` (1e-6), not with the
    attention nets at ``lr_at`` (2e-6), on all three datasets; the head's linear layer stays in the head group
    (a declared difference, docs/methods/dcml.md)."""
    config = resolve_config("dcml", dataset)
    assert config.loss["head_norm_group"] == "backbone"
    method = toy_dcml(head_norm_group=config.loss["head_norm_group"])
    groups = build_optimizer(config, method).param_groups
    rates = {id(p): group["lr"] for group in groups for p in group["params"]}
    for parameter in method.head.norm.parameters():
        assert rates[id(parameter)] == config.optim.lr_backbone == 1e-6
    for module in (method.head.linear, method.attention, method.erm_attention):
        assert {rates[id(p)] for p in module.parameters()} == {config.optim.lr_head}
    trainable = [p for p in method.parameters() if p.requires_grad]
    assert sorted(rates) == sorted(id(p) for p in trainable)  # each trainable parameter in one group


def test_the_head_option_keeps_the_head_s_batchnorm_in_the_head_group():
    method = toy_dcml(head_norm_group="head")
    groups = method.parameter_groups()
    norm = {id(p) for p in method.head.norm.parameters()}
    assert norm <= {id(p) for p in groups["head"]} and not norm & {id(p) for p in groups["backbone"]}
    data = resolve_config("dcml", "sop").as_dict()
    del data["loss"]["head_norm_group"]  # an option a run does not name takes its default
    assert DCML.options_with_defaults(config_from_dict(data).loss)["head_norm_group"] == "backbone"
    listed = CliRunner().invoke(main, ["methods"])
    assert listed.exit_code == 0 and "head_norm_group='backbone' (one of: backbone, head)" in listed.output


def test_only_the_sop_configuration_trains_in_paired_halves():
    # The authors' SOP code trains each batch in two steps (γ to the pair partner); CUB/Cars code does not.
    paired = {d: resolve_config("dcml", d).loss["paired_halves"] for d in ("cub", "cars", "sop", "bench")}
    assert paired == {"cub": False, "cars": False, "sop": True, "bench": False}
    sop = resolve_config("dcml", "sop")
    assert sop.data.m_per_class == 2 and sop.data.batch_size == 64  # 32 pairs: one image per class per half


@pytest.mark.parametrize(
    ("options", "message"),
    [({"enviroments": 2}, "does not know"), ({"environments": 0}, "environments"),
     ({"env_passes": 1.5}, "env_passes"), ({"paired_halves": "yes"}, "paired_halves"),
     ({"head_norm_group": "loss"}, "one of: backbone, head")],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(OptionError, match=message):
        toy_dcml(**options)


def test_the_input_size_is_required():
    with pytest.raises(OptionError, match="input size"):
        DCML(toy_backbone(), MethodSpec(DIM, CLASSES, 12))
