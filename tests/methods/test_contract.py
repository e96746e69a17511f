"""The contract every registered method keeps (docs/design.md, *Methods*), run over all of them as timm tests
models."""

from __future__ import annotations

import pytest
import torch

from bgbias.data.registry import dataset_names
from bgbias.engine.config import resolve_config
from bgbias.errors import OptionError
from bgbias.methods.base import Batch, Method, MethodSpec
from bgbias.methods.registry import method_class, method_names, register_method
from bgbias.models.registry import build_backbone
from tests.calibration import calibrate_batchnorm

BASELINES = {
    "contrastive", "triplet", "multi_similarity", "arcface", "normalized_softmax", "cosface", "proxy_anchor",
    "margin",
}
CLASSES, PER_CLASS, SIDE, DIM = 4, 2, 32, 16


def build(name: str, **options) -> Method:
    torch.manual_seed(0)
    backbone = build_backbone("tiny_cnn", pretrained=False)
    defaults = resolve_config(name, "folder").loss
    spec = MethodSpec(DIM, CLASSES, CLASSES * PER_CLASS, options={**defaults, **options}, input_size=SIDE)
    return calibrate_batchnorm(method_class(name)(backbone, spec))


def batch() -> Batch:
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(CLASSES * PER_CLASS, 3, SIDE, SIDE, generator=generator)
    labels = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    return Batch(images, labels, torch.arange(CLASSES * PER_CLASS))


def test_every_baseline_is_registered():
    assert set(method_names()) >= BASELINES


@pytest.mark.parametrize("name", method_names())
def test_loss_is_finite_and_reaches_every_trainable_parameter(name):
    method = build(name)
    method.train()
    terms = method.loss(batch())
    assert "loss" in terms and terms["loss"].dim() == 0 and torch.isfinite(terms["loss"])
    terms["loss"].backward()
    groups = method.parameter_groups()
    grouped = [p for params in groups.values() for p in params]
    assert len(grouped) == len({id(p) for p in grouped}), "a parameter is in two groups"
    trainable = [p for p in method.parameters() if p.requires_grad]
    assert {id(p) for p in trainable} == {id(p) for p in grouped}
    missing = [n for n, p in method.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"no gradient reaches {missing[:5]}"
    for group, params in groups.items():
        if params:
            norm = torch.stack([p.grad.norm() for p in params]).sum()
            assert torch.isfinite(norm) and norm > 0, f"group {group} gets no gradient"
    assert groups["backbone"] and groups["head"]


@pytest.mark.parametrize("name", method_names())
def test_eval_embedding_shape_norm_and_batch_independence(name):
    method = build(name).eval()
    images = batch().images
    with torch.no_grad():
        full = method.embed(images)
        alone = torch.cat([method.embed(images[i : i + 1]) for i in range(len(images))])
    assert full.shape == (len(images), DIM)
    assert torch.allclose(full.norm(dim=1), torch.ones(len(images)), atol=1e-5)
    assert torch.allclose(full, alone, atol=1e-4)  # float noise of batch-size-dependent kernels: ~3e-5


@pytest.mark.parametrize("name", method_names())
def test_embeddings_differ_and_pairwise_distance_ranks_them(name):
    method = build(name).eval()
    with torch.no_grad():
        embeddings = method.embed(batch().images)
        distances = method.pairwise_distance(embeddings[:3], embeddings)
    assert distances.shape == (3, len(embeddings))
    assert torch.cdist(embeddings, embeddings).triu(1).max() > 1e-3, "every image gets the same embedding"
    if not method.learned_similarity:
        # Retrieval then ranks by squared L2 (faiss): the method's own distance must order items the same way.
        squared_l2 = torch.cdist(embeddings[:3], embeddings) ** 2
        assert torch.equal(distances.argsort(dim=1), squared_l2.argsort(dim=1))


@pytest.mark.parametrize("dataset", dataset_names())
@pytest.mark.parametrize("name", method_names())
def test_configuration_exists_for_every_dataset(name, dataset):
    assert isinstance(resolve_config(name, dataset).loss, dict)


def test_proxy_losses_own_loss_parameters():
    assert build("arcface").parameter_groups()["loss"]
    assert not build("triplet").parameter_groups()["loss"]


def test_multi_similarity_miner_is_optional():
    assert build("multi_similarity").miner is None
    assert build("multi_similarity", miner_epsilon=0.1).miner is not None


def test_a_bad_loss_option_is_named_with_the_allowed_ones():
    with pytest.raises(OptionError, match="margn") as err:
        build("triplet", margn=0.1)
    assert "margin, smooth_loss, swap, triplets_per_anchor" in err.value.render()


@pytest.mark.parametrize("dataset", dataset_names())
@pytest.mark.parametrize("name", method_names())
def test_every_method_declares_the_options_of_its_configuration(name, dataset):
    loss = resolve_config(name, dataset).loss
    method_class(name).check_options(loss)
    assert set(loss) <= set(method_class(name).option_types())


def test_options_set_from_the_data_are_not_options():
    with pytest.raises(OptionError, match="num_classes"):
        build("arcface", num_classes=3)


def test_unknown_method_lists_the_known_ones():
    with pytest.raises(OptionError, match="multi_similarity"):
        method_class("nope")


def test_registering_a_name_twice_is_refused():
    class One(Method):
        def loss(self, batch):
            raise AssertionError

        def embed(self, images):
            raise AssertionError

    with pytest.raises(ValueError, match="registered twice"):
        register_method("triplet")(One)
