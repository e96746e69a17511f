"""AVSL's attribution (``--attribution avsl``): the per-node shares of a pair sum to the pair's d̂, each share
lands where its node's map puts it, the options (weigh, level), the refusal of other models, and a run of
the explain runner on an AVSL model with its reference images."""

from __future__ import annotations

import pytest
import torch

from bgbias.attribution.run import ExplainInputs, explain_items
from bgbias.data.registry import open_dataset
from bgbias.data.splits import split_items
from bgbias.data.transforms import EvalGeometry
from bgbias.engine.method_model import MethodModel
from bgbias.errors import OptionError
from bgbias.measurement.request import MeasureRequest
from bgbias.methods.attribution import build_attribution, check_supported, needs_references
from bgbias.methods.avsl.explainer import NodeAttribution, pair_shares, spread_over_maps
from tests.attribution.tiny import baseline
from tests.methods.test_avsl import SIDE, toy_avsl, toy_batch
from tests.replicas import make_bench


def images(count: int, seed: int) -> torch.Tensor:
    return torch.rand(count, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> MethodModel:
    """A tiny AVSL whose edges have seen one training batch (fresh edges are all zero)."""
    method = toy_avsl().train()
    method.loss(toy_batch())
    return MethodModel(method.eval(), torch.device("cpu"), home=tmp_path_factory.mktemp("home"))


def test_avsl_is_registered_with_references_and_serves_only_avsl(model):
    attribution = build_attribution("avsl")
    assert isinstance(attribution, NodeAttribution) and needs_references(attribution)
    assert attribution.options() == {"weigh": "contribution", "level": None}
    assert attribution.supports(model)
    other = MethodModel(baseline(), torch.device("cpu"))
    with pytest.raises(OptionError, match="AVSL runs"):
        check_supported("avsl", attribution, other)


@pytest.mark.parametrize(("options", "words"), [({"weigh": "gradient"}, "contribution, weight"),
                                                ({"level": 4}, "from 1 to 3")])
def test_bad_options_are_refused_naming_the_choices(options, words):
    with pytest.raises(OptionError) as err:
        build_attribution("avsl", **options)
    assert words in err.value.render()


def test_the_shares_of_a_pair_sum_to_its_distance(model):
    method = model.method
    queries, references = images(3, 0), images(3, 1)
    with torch.no_grad():
        units, maps = method.forward_levels(torch.cat([queries, references]))
        shares = pair_shares(method, units, maps, 3, "contribution")
        distance = method.pairwise_distance(method.embed(queries), method.embed(references)).diagonal()
    assert len(shares) == 3 and all(share.shape == (3, method.dim) for share in shares)
    assert torch.allclose(sum(share.sum(dim=1) for share in shares), distance, rtol=1e-4, atol=1e-6)
    weights = pair_shares(method, units, maps, 3, "weight")
    # where every W̃ row sums to 1 the weights of a pair add up to r (Property 1)
    assert torch.allclose(sum(w.sum(dim=1) for w in weights), torch.full((3,), float(method.dim)), atol=1e-3)


def test_each_share_lands_where_its_node_s_map_puts_it():
    # one image, two nodes per level, 2 × 2 maps: node 0 fires at the top left, node 1 at the bottom right;
    # negative activation draws nothing
    cam = torch.full((1, 2, 2, 2), -1.0)
    cam[0, 0, 0, 0], cam[0, 1, 1, 1] = 5.0, 3.0
    shares = [torch.tensor([[2.0, 1.0]]), torch.tensor([[0.5, 0.0]]), torch.tensor([[0.0, 4.0]])]
    spread = spread_over_maps(shares, [cam, cam, cam], torch.Size((2, 2)), None)
    assert torch.allclose(spread, torch.tensor([[[2.5, 0.0], [0.0, 5.0]]]))
    assert torch.allclose(spread_over_maps(shares, [cam] * 3, torch.Size((2, 2)), 3),
                          torch.tensor([[[0.0, 0.0], [0.0, 4.0]]]))
    # a node proportionally: 3 and 1 split its share 3 : 1; a node nowhere positive draws nothing
    graded = torch.tensor([[[[3.0, 1.0], [0.0, -2.0]], [[-1.0, -1.0], [-1.0, -1.0]]]])
    spread = spread_over_maps([torch.tensor([[4.0, 7.0]])], [graded], torch.Size((2, 2)), 1)
    assert torch.allclose(spread, torch.tensor([[[3.0, 1.0], [0.0, 0.0]]]))


def test_maps_are_in_the_unit_range_and_an_image_against_itself_has_nothing_to_show(model):
    queries, references = images(2, 0), images(2, 1)
    maps = NodeAttribution()(model, queries, None, references)
    assert maps.shape == (2, SIDE, SIDE) and float(maps.min()) >= 0
    assert torch.allclose(maps.amax(dim=(1, 2)), torch.ones(2))
    assert float(NodeAttribution()(model, queries, None, queries).abs().max()) == 0.0
    weighted = NodeAttribution(weigh="weight")(model, queries, None, queries)
    assert torch.allclose(weighted.amax(dim=(1, 2)), torch.ones(2))  # weights do not vanish with δ
    with pytest.raises(OptionError, match="reference"):
        NodeAttribution()(model, queries, None)


def test_the_explain_runner_scores_an_avsl_model_against_its_references(model, tmp_path):
    root = make_bench(tmp_path / "bench", train_classes=1, val_classes=1, test_classes=3, per_class=4)
    items = split_items(open_dataset("bench", root), "test")
    inputs = ExplainInputs(items, EvalGeometry(resize=SIDE, crop=SIDE), "bench", tmp_path / "none",
                           tmp_path / "out")
    request = MeasureRequest(attribution="avsl", batch_size=4, gallery_count=2, progress=False)
    result = explain_items(model, inputs, request, log=lambda line: None)
    assert result.summary["scored"] == len(items)
    assert 0 <= result.summary["mean"] <= 1
