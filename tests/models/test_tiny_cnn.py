"""tiny_cnn, the registered test backbone: its stages, and no random weights unless asked for."""

from __future__ import annotations

import pytest
import torch

from bgbias.errors import AssetError
from bgbias.models.registry import build_backbone


def test_stages_channels_and_strides_are_the_documented_ones():
    backbone = build_backbone("tiny_cnn", pretrained=False)
    outputs = backbone(torch.rand(2, 3, 32, 32), taps=backbone.stages)
    assert {stage: tuple(out.shape[1:]) for stage, out in outputs.items()} == {
        "stride2": (8, 16, 16), "stride4": (16, 8, 8), "final": (32, 8, 8),
    }
    assert backbone.levels == ("stride2", "stride4", "final")
    assert sum(p.numel() for p in backbone.parameters()) < 10_000


def test_pretrained_without_a_weight_file_is_an_asset_error_naming_the_fix():
    with pytest.raises(AssetError, match="no pretrained weights") as caught:
        build_backbone("tiny_cnn")
    assert "model.pretrained=false" in caught.value.fix


def test_a_saved_tiny_cnn_loads_back_and_a_foreign_file_is_refused(tmp_path):
    torch.manual_seed(0)
    saved = build_backbone("tiny_cnn", pretrained=False)
    torch.save(saved.state_dict(), tmp_path / "tiny.pth")
    loaded = build_backbone("tiny_cnn", weights=tmp_path / "tiny.pth")
    for key, tensor in saved.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key
    torch.save({"conv.weight": torch.zeros(8, 3, 3, 3)}, tmp_path / "other.pth")
    with pytest.raises(AssetError, match="lacks"):
        build_backbone("tiny_cnn", weights=tmp_path / "other.pth")
