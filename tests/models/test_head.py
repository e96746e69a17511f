"""EmbeddingHead: pooled, projected, unit length."""

from __future__ import annotations

import pytest
import torch

from bgbias.errors import OptionError
from bgbias.models.head import POOLINGS, EmbeddingHead, global_pool


@pytest.fixture
def feature_map() -> torch.Tensor:
    return torch.randn(3, 16, 4, 5, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_shape_and_unit_norm(feature_map, pooling):
    embedding = EmbeddingHead(16, 8, pooling=pooling)(feature_map)
    assert embedding.shape == (3, 8)
    torch.testing.assert_close(embedding.norm(dim=1), torch.ones(3))


def test_pooling_variants(feature_map):
    flat = feature_map.flatten(2)
    torch.testing.assert_close(global_pool(feature_map, "avg"), flat.mean(2))
    torch.testing.assert_close(global_pool(feature_map, "max"), flat.max(2).values)
    torch.testing.assert_close(global_pool(feature_map, "avg+max"), flat.mean(2) + flat.max(2).values)


def test_gradients_flow_into_the_feature_map(feature_map):
    feature_map.requires_grad_(True)
    EmbeddingHead(16, 8, pooling="avg+max")(feature_map)[:, 0].sum().backward()
    assert feature_map.grad is not None and feature_map.grad.abs().sum() > 0


def test_unknown_pooling_is_an_option_error():
    with pytest.raises(OptionError, match="unknown pooling 'mean'") as caught:
        EmbeddingHead(16, 8, pooling="mean")
    assert "avg+max" in caught.value.fix
