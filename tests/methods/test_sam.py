"""SAM's self-tests (docs/methods/sam.md, *Self-tests*): the attention maps, the second-order path, soft
erasing, a toy that SAM must localise, the eval embedding, the variants, the tuples and the options."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from bgbias.engine.config import resolve_config
from bgbias.engine.training import train
from bgbias.errors import OptionError
from bgbias.methods.base import Batch, MethodSpec
from bgbias.methods.baselines import Triplet
from bgbias.methods.sam.attention import mining_loss, normalise_maps, similarity_scores, similarity_weights
from bgbias.methods.sam.method import SAM
from bgbias.methods.sam.mining import mine_tuples
from bgbias.models.registry import build_backbone
from tests.conftest import tiny_config

CLASSES, PER_CLASS, SIDE, DIM = 3, 4, 32, 16


def toy_sam(**options) -> SAM:
    torch.manual_seed(0)
    defaults = resolve_config("sam", "folder").loss
    spec = MethodSpec(DIM, CLASSES, 1000, options={**defaults, **options}, input_size=SIDE)
    return SAM(build_backbone("tiny_cnn", pretrained=False), spec)


def toy_batch(seed: int = 1, per_class: int = PER_CLASS) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(CLASSES * per_class, 3, SIDE, SIDE, generator=generator)
    labels = torch.arange(CLASSES).repeat_interleave(per_class)
    return Batch(images, labels, torch.arange(CLASSES * per_class))


def tuples_of(batch: Batch, variant: str = "triplet", max_tuples: int = 64):
    return mine_tuples(batch.labels, batch.indices, variant, max_tuples)


def conv_weight(method: SAM, stage: str) -> torch.Tensor:
    return method.backbone.blocks[stage][0].weight


# ------------------------------------------------------------------------------------ attention maps
def test_channel_weights_are_the_finite_difference_gradient_of_the_score():
    """α_k = GAP(∂s/∂A_k) against central differences of s when channel k of one image's A moves as a
    whole; the maps built from those α equal the method's, are ≥ 0 and have A's spatial shape."""
    method = toy_sam(stage="stride4").double().eval()
    batch = toy_batch()
    images, tuples = batch.images.double(), tuples_of(batch)
    with torch.no_grad():
        features, embeddings = method.features_and_embeddings(images)
        weights = similarity_weights(embeddings, tuples.rows, "triplet")

    def score(a: torch.Tensor) -> torch.Tensor:
        f = method.head(method.backbone.forward_from("stride4", a)["final"])
        return similarity_scores(f, tuples.rows, weights)

    leaf = features.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(score(leaf), leaf)
    alpha = gradient.mean(dim=(2, 3))
    n, c, h, w = features.shape
    eps, numeric = 1e-6, torch.empty_like(alpha)
    with torch.no_grad():
        for i in range(n):
            for k in range(c):
                bump = torch.zeros_like(features)
                bump[i, k] = eps
                numeric[i, k] = (score(features + bump) - score(features - bump)) / (2 * eps * h * w)
    assert alpha.abs().max() > 1e-3  # the check is not vacuous
    assert torch.allclose(alpha, numeric, rtol=1e-5, atol=1e-8)

    leaf = features.clone().requires_grad_()
    f = method.head(method.backbone.forward_from("stride4", leaf)["final"])
    maps = method.attention(leaf, f, tuples, create_graph=False)
    expected = F.relu((numeric[:, :, None, None] * features).sum(dim=1))
    assert maps.shape == (n, h, w) and (h, w) == (8, 8)
    assert maps.min() >= 0 and maps.max() > 0
    assert torch.allclose(maps, expected, rtol=1e-5, atol=1e-10)


def test_the_mask_path_alone_reaches_the_weights_below_and_above_the_stage():
    """The direct path blocked (f* from a frozen copy of the encoder), L_sm still trains the convolutions
    below A (through A and ∂s/∂A) and the one above it, which the maps see only through ∂s/∂A: the
    second-order path."""
    method = toy_sam(stage="stride4").train()
    batch = toy_batch()
    step = method.step(batch.images, tuples_of(batch))
    frozen = copy.deepcopy(method).requires_grad_(False)
    mining_loss(frozen.embed(step.erased_images), step.local, "triplet").backward()
    for stage in ("stride2", "stride4", "final"):
        grad = conv_weight(method, stage).grad
        assert grad is not None and grad.abs().sum() > 0, stage

    constant = method.step(batch.images, tuples_of(batch), create_graph=False)
    assert not mining_loss(frozen.embed(constant.erased_images), constant.local, "triplet").requires_grad


def test_maps_do_not_depend_on_the_sign_of_an_embedding_axis():
    """Flipping one axis of the embedding changes no distance; the default score (wᵀ|f|) keeps the maps,
    the paper's literal projection (wᵀf) does not."""
    batch = toy_batch()
    tuples = tuples_of(batch)
    maps = {}
    for score in ("magnitude", "projection"):
        for flip in (False, True):
            method = toy_sam(score=score).eval()
            if flip:
                with torch.no_grad():
                    method.head.linear.weight[3] *= -1
                    method.head.linear.bias[3] *= -1
            features, embeddings = method.features_and_embeddings(batch.images)
            maps[score, flip] = method.attention(features, embeddings, tuples, create_graph=False)
    assert torch.allclose(maps["magnitude", False], maps["magnitude", True], atol=1e-6)
    assert not torch.allclose(maps["projection", False], maps["projection", True], atol=1e-3)


# ------------------------------------------------------------------------------------------- erasing
def test_the_mask_lies_strictly_between_0_and_1():
    method = toy_sam().train()
    batch = toy_batch()
    step = method.step(batch.images, tuples_of(batch))
    assert step.mask.shape == (len(step.used), 1, SIDE, SIDE)
    assert step.mask.min() > 0 and step.mask.max() < 1
    assert normalise_maps(step.maps[step.used]).max() == 1


def test_a_huge_threshold_erases_nothing_and_the_mining_loss_is_that_of_the_clean_features():
    method = toy_sam(threshold=1e6).train()
    batch = toy_batch()
    tuples = tuples_of(batch)
    step = method.step(batch.images, tuples)
    assert torch.allclose(step.erased_images, batch.images[step.used], atol=1e-6)
    terms = method.loss(batch)
    with torch.no_grad():
        f = method.embed(batch.images)
    a, p, n = (f[tuples.rows[:, role]] for role in range(3))
    clean = ((a - p).norm(dim=1) - (a - n).norm(dim=1)).abs().mean()
    assert terms["erased_fraction"] < 1e-6
    assert torch.allclose(terms["mining_loss"], clean, atol=1e-5)
    assert torch.allclose(terms["loss"], terms["metric_loss"] + 0.25 * clean, atol=1e-5)


def test_erasing_happens_in_the_network_s_input_space():
    """A mask of 1 everywhere turns an image into the input convention's mean colour (tiny_cnn: grey 0.5),
    whatever the image."""
    method = toy_sam()
    images = toy_batch().images[:2]
    erased = method.erase(images, torch.ones(2, 1, SIDE, SIDE))
    assert torch.allclose(erased, torch.full_like(images, 0.5), atol=1e-6)


# ----------------------------------------------------------------------------------------------- toy
PATCH, RED = 8, torch.tensor([1.0, 0.1, 0.1])


def patch_batch(generator: torch.Generator, per_class: int, offset: int = 0):
    """Two classes of grey-noise images; class 1 alone has a red 8×8 patch at a random place."""
    labels = torch.arange(2).repeat_interleave(per_class)
    images = (torch.rand(len(labels), 1, SIDE, SIDE, generator=generator) * 0.6 + 0.2).repeat(1, 3, 1, 1)
    patches = torch.zeros(len(labels), SIDE, SIDE, dtype=torch.bool)
    corners = torch.randint(0, SIDE - PATCH + 1, (len(labels), 2), generator=generator)
    for i, (y, x) in enumerate(corners.tolist()):
        if labels[i] == 1:
            images[i, :, y : y + PATCH, x : x + PATCH] = RED[:, None, None]
            patches[i, y : y + PATCH, x : x + PATCH] = True
    return Batch(images, labels, torch.arange(len(labels)) + offset), patches


@pytest.mark.slow
def test_on_a_toy_the_attention_finds_the_patch_and_both_losses_fall():
    """The spec's toy (docs/methods/sam.md, *Self-tests*): the only difference between the classes is a
    small coloured patch at a random place. After 300 steps the attention region (normalised map ≥ the
    erasing threshold 0.5, upsampled) of the patch images overlaps their patch with IoU > 0.5, nine maps in
    ten peak on the patch, and L_ml and L_sm are below half their starting level. About 3 s on a CPU; over
    six seeds the IoU was 0.53–0.68 and 94–100 % of the peaks hit."""
    method = toy_sam()
    optimizer = torch.optim.Adam(method.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    method.train()
    history = []
    for step in range(300):
        batch, _ = patch_batch(generator, 8, offset=100 * step)
        terms = method.loss(batch)
        optimizer.zero_grad()
        terms["loss"].backward()
        optimizer.step()
        history.append([float(terms["metric_loss"]), float(terms["mining_loss"])])
    first, last = torch.tensor(history[:50]).mean(0), torch.tensor(history[-50:]).mean(0)
    assert (last < 0.5 * first).all(), (first, last)

    method.eval()
    batch, patches = patch_batch(generator, 16)
    step = method.step(batch.images, tuples_of(batch), create_graph=False)
    maps = F.interpolate(normalise_maps(step.maps)[:, None], size=(SIDE, SIDE), mode="bilinear",
                         align_corners=False)[:, 0]
    shown = batch.labels == 1
    region, patch = maps[shown] >= 0.5, patches[shown]
    iou = (region & patch).flatten(1).sum(1) / (region | patch).flatten(1).sum(1)
    assert iou.mean() > 0.5, iou
    peaks = maps[shown].flatten(1).argmax(dim=1)
    assert patch.flatten(1).gather(1, peaks[:, None]).float().mean() >= 0.9


# ------------------------------------------------------------------------------------------ inference
def test_the_eval_embedding_is_the_triplet_baseline_s_with_the_same_weights():
    sam = toy_sam()
    spec = MethodSpec(DIM, CLASSES, 1000, options=resolve_config("triplet", "folder").loss, input_size=SIDE)
    triplet = Triplet(build_backbone("tiny_cnn", pretrained=False), spec)
    triplet.load_state_dict(sam.state_dict())  # the same keys: SAM adds no parameters or buffers
    images = toy_batch(seed=5).images
    sam.eval()
    triplet.eval()
    with torch.no_grad():
        before = sam.embed(images)
        assert torch.equal(before, triplet.embed(images))
    sam.train()
    sam.loss(toy_batch())  # the SAM machinery runs, no update
    sam.eval()
    with torch.no_grad():
        assert torch.equal(sam.embed(images), before)


def test_the_erased_pass_leaves_the_running_statistics_of_unfrozen_batchnorm_alone():
    """With BatchNorm training (model.freeze_batchnorm=false), a SAM step moves the running statistics
    exactly as the one clean forward pass of a baseline's step does."""
    sam = toy_sam()
    sam.backbone.freeze_batchnorm = False
    clean = copy.deepcopy(sam)
    batch = toy_batch()
    sam.train().loss(batch)
    clean.train().embed(batch.images)
    for (name, a), (_, b) in zip(sam.backbone.named_buffers(), clean.backbone.named_buffers(), strict=True):
        assert torch.equal(a, b), name
    assert sam.backbone.blocks["final"][1].num_batches_tracked == 1


# ------------------------------------------------------------------------------------------ variants
@pytest.mark.parametrize("variant", ["triplet", "siamese", "quadruplet"])
def test_every_variant_gives_finite_terms_that_train_the_whole_network(variant):
    method = toy_sam(variant=variant).train()
    terms = method.loss(toy_batch())
    assert set(terms) == {"loss", "metric_loss", "mining_loss", "erased_fraction", "zero_maps"}
    assert all(torch.isfinite(value) and value.dim() == 0 for value in terms.values())
    assert 0 < terms["erased_fraction"] < 1 and 0 <= terms["zero_maps"] <= 1
    if variant == "siamese":
        assert terms["mining_loss"] <= 0  # −min(‖1* − 2*‖, 2) over same-class pairs
    terms["loss"].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in method.parameters())


def test_the_quadruplet_base_loss_is_the_sum_of_its_two_triplet_terms():
    method = toy_sam(variant="quadruplet")
    batch = toy_batch()
    tuples = tuples_of(batch, "quadruplet")
    f = method.embed(batch.images)
    a, p, n1, n2 = (f[tuples.rows[:, role]] for role in range(4))
    d = torch.nn.functional.pairwise_distance
    expected = ((d(a, p) - d(a, n1) + 0.2).clamp_min(0) + (d(a, p) - d(a, n2) + 0.2).clamp_min(0)).mean()
    assert torch.allclose(method.metric_loss(f, tuples), expected, atol=1e-6)


# -------------------------------------------------------------------------------------------- tuples
@pytest.mark.parametrize("variant", ["triplet", "siamese", "quadruplet"])
@pytest.mark.parametrize("max_tuples", [1, 7, 64, 10_000])
def test_tuples_are_valid_and_bounded(variant, max_tuples):
    batch = toy_batch()
    labels = batch.labels
    tuples = tuples_of(batch, variant, max_tuples)
    rows = tuples.rows
    assert 1 <= len(tuples) <= max_tuples
    if variant == "siamese":
        assert torch.equal(tuples.same, labels[rows[:, 0]] == labels[rows[:, 1]])
        assert (rows[:, 0] < rows[:, 1]).all()
        assert int(tuples.same.sum()) == min((max_tuples + 1) // 2, CLASSES * 6)  # 6 pairs per class
        return
    assert tuples.same is None
    assert (labels[rows[:, 0]] == labels[rows[:, 1]]).all() and (rows[:, 0] != rows[:, 1]).all()
    for role in range(2, rows.shape[1]):
        assert (labels[rows[:, role]] != labels[rows[:, 0]]).all()
    if variant == "quadruplet":  # a second negative of another class than the first (3 classes here)
        assert (labels[rows[:, 3]] != labels[rows[:, 2]]).all()
    every = CLASSES * PER_CLASS * (PER_CLASS - 1) * (CLASSES - 1) * PER_CLASS
    assert len(tuples) == min(max_tuples, every)
    assert len({tuple(row) for row in rows.tolist()}) == len(tuples)


def test_tuples_are_fixed_by_the_batch_and_leave_global_randomness_alone():
    batch = toy_batch()
    state = torch.get_rng_state()
    first = tuples_of(batch, max_tuples=16)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(123)
    assert torch.equal(tuples_of(batch, max_tuples=16).rows, first.rows)
    other = Batch(batch.images, batch.labels, batch.indices + 12)
    assert not torch.equal(tuples_of(other, max_tuples=16).rows, first.rows)


def test_a_batch_without_a_same_class_pair_is_refused_with_the_fix():
    batch = Batch(torch.rand(4, 3, SIDE, SIDE), torch.arange(4), torch.arange(4))
    with pytest.raises(OptionError) as err:
        toy_sam().loss(batch)
    assert "data.m_per_class" in err.value.render()


# ------------------------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("loss.variant=pair", "triplet, siamese, quadruplet"),
        ("loss.score=dot", "magnitude, projection"),
        ("loss.sharpness=0", "positive"),
        ("loss.max_tuples=0", "at least 1"),
        ("loss.gamma=-1", "0 or more"),
        ("loss.stage=3", "a string"),
        ("loss.threshhold=0.5", "does not know"),
    ],
)
def test_bad_options_stop_the_configuration_with_the_choices(setting, words):
    with pytest.raises(OptionError) as err:
        resolve_config("sam", "bench", overrides=[setting])
    assert words in err.value.render()


def test_an_unknown_stage_is_named_with_the_backbone_s_stages():
    with pytest.raises(OptionError) as err:
        toy_sam(stage="layer4")
    assert "layer4" in err.value.render() and "stride2, stride4, final" in err.value.render()


def test_the_default_stage_is_the_backbone_s_last_and_configurations_take_the_paper_s_gamma():
    assert toy_sam().stage == "final" and toy_sam(stage="stride4").stage == "stride4"
    for dataset in ("cub", "cars", "sop", "bench"):
        loss = resolve_config("sam", dataset).loss
        assert (loss["variant"], loss["gamma"], loss["margin"]) == ("triplet", 0.25, 0.2)
        assert loss["max_tuples"] == 64
        assert (loss["sharpness"], loss["threshold"], loss["stage"]) == (10.0, 0.5, None)


# ------------------------------------------------------------------------------------------------ run
@pytest.mark.slow
def test_a_sam_run_records_its_loss_terms(tiny_bench, tmp_path):
    config = tiny_config(tiny_bench, "sam", epochs=1)
    result = train(config, run_dir=tmp_path / "sam", progress=False, echo=False)
    row = result.history[1]
    for name in ("loss", "metric_loss", "mining_loss", "erased_fraction", "zero_maps"):
        assert f"train_{name}" in row
    assert 0 < row["train_erased_fraction"] < 1
