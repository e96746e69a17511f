"""The contract every registered method keeps (docs/design.md, *Methods*), run over all of them as timm tests
models."""

from __future__ import annotations

import pytest
import torch

from bgbias.data.registry import dataset_names
from bgbias.engine.config import resolve_config
from bgbias.errors import OptionError
from bgbias.methods.attribution import ATTRIBUTIONS
from bgbias.methods.base import Batch, Method, MethodSpec
from bgbias.methods.registry import method_class, method_names, register_method
from bgbias.models.registry import build_backbone
from bgbias.retrieval.metrics import score_embeddings
from bgbias.retrieval.retrievers import ExactL2, Retrieval
from bgbias.retrieval.state import EMBEDDING, model_form, named_arrays, take_rows
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
def test_eval_state_shape_norm_and_batch_independence(name):
    method = build(name).eval()
    images = batch().images
    with torch.no_grad():
        full = named_arrays(method.embed(images))
        alone = [named_arrays(method.embed(images[i : i + 1])) for i in range(len(images))]
    for array_name, array in full.items():
        assert array.shape[0] == len(images), array_name
        stacked = torch.cat([state[array_name] for state in alone])
        assert torch.allclose(array, stacked, atol=1e-4)  # float noise of batch-size-dependent kernels: ~3e-5
    if method.unit_norm:
        assert set(full) == {EMBEDDING} and full[EMBEDDING].shape == (len(images), DIM)
        assert torch.allclose(full[EMBEDDING].norm(dim=1), torch.ones(len(images)), atol=1e-5)


@pytest.mark.parametrize("name", method_names())
def test_embeddings_differ_and_pairwise_distance_ranks_them(name):
    method = build(name).eval()
    with torch.no_grad():
        state = method.embed(batch().images)
        queries = model_form(take_rows(named_arrays(state), slice(0, 3)))
        distances = method.pairwise_distance(queries, state)
    assert distances.shape == (3, len(batch().images))
    spread = distances.max(dim=1).values - distances.min(dim=1).values
    assert spread.max() > 1e-3, "every image gets the same state"
    if isinstance(method.retrieval(), ExactL2):
        # Retrieval then ranks by squared L2 (faiss): the method's own distance must order items the same way.
        embeddings = named_arrays(state)[method.retrieval().key]
        assert torch.cdist(embeddings, embeddings).triu(1).max() > 1e-3, "every image gets the same embedding"
        squared_l2 = torch.cdist(embeddings[:3], embeddings) ** 2
        assert torch.equal(distances.argsort(dim=1), squared_l2.argsort(dim=1))


@pytest.mark.parametrize("name", method_names())
def test_the_method_s_retrieval_searches_and_scores_on_the_method_s_device(name):
    method = build(name)
    assert torch.device(method.retrieval().device) == next(method.parameters()).device


@pytest.mark.parametrize("name", method_names())
def test_validation_and_evaluation_rank_with_the_method_s_retrieval(name):
    method = build(name).eval()
    retrieval = method.retrieval()
    assert isinstance(retrieval, Retrieval) and isinstance(retrieval.describe(), str)
    with torch.no_grad():
        state = {key: array.numpy() for key, array in named_arrays(method.embed(batch().images)).items()}
    scores = score_embeddings(state, batch().labels, retrieval=retrieval)
    assert scores.scored == len(batch().labels) and 0.0 <= scores.map_at_r <= 1.0


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


def test_the_margin_loss_samples_distance_weighted_triplets_on_request():
    assert build("margin").miner is None
    assert type(build("margin", distance_weighted=True).miner).__name__ == "DistanceWeightedMiner"


def test_a_bad_loss_option_is_named_with_the_allowed_ones():
    with pytest.raises(OptionError, match="margn") as err:
        build("triplet", margn=0.1)
    assert "margin, smooth_loss, swap, triplets_per_anchor" in err.value.render()


@pytest.mark.parametrize("dataset", dataset_names())
@pytest.mark.parametrize("name", method_names())
def test_every_method_declares_the_options_of_its_configuration(name, dataset):
    loss = resolve_config(name, dataset).loss
    method_class(name).check_options(loss)
    assert set(loss) <= set(method_class(name).options_model().model_fields)


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


@pytest.mark.parametrize("name", method_names())
def test_a_methods_own_attribution_is_registered(name):
    own = method_class(name).own_attribution
    assert own is None or own in ATTRIBUTIONS
