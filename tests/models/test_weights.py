"""fit_state: every model key found with its shape, every file key used, the first misfit named."""

from __future__ import annotations

import pytest
import torch

from bgbias.errors import AssetError
from bgbias.models.weights import fit_state, weights_dir

MODEL = {
    "a.weight": torch.zeros(2, 3),
    "bn.running_mean": torch.zeros(2),
    "bn.num_batches_tracked": torch.tensor(0),
    "head.weight": torch.zeros(5, 2),
}


def fit(file_state, **kwargs):
    return fit_state(MODEL, file_state, path="w.pth", fix="use the right file", **kwargs)


def test_keys_are_renamed_and_unused_keys_skipped_on_both_sides():
    file_state = {"A.weight": torch.ones(2, 3), "BN.running_mean": torch.ones(2), "HEAD.x": torch.ones(9)}

    def source_key(key: str) -> str:
        module, tensor = key.split(".")
        return f"{module.upper()}.{tensor}"

    fitted = fit(file_state, source_key=source_key, unused=lambda key: key.lower().startswith("head."))
    assert set(fitted) == {"a.weight", "bn.running_mean"}  # num_batches_tracked may be absent
    assert torch.equal(fitted["a.weight"], torch.ones(2, 3))


def test_a_missing_key_is_named():
    with pytest.raises(AssetError, match=r"lacks 'bn\.running_mean'") as caught:
        fit({"a.weight": torch.ones(2, 3), "head.weight": torch.ones(5, 2)})
    assert caught.value.path == "w.pth"
    assert caught.value.fix == "use the right file"


def test_a_wrong_shape_is_named():
    state = {"a.weight": torch.ones(3, 2), "bn.running_mean": torch.ones(2), "head.weight": torch.ones(5, 2)}
    with pytest.raises(AssetError, match=r"'a\.weight' in the weight file has shape \(3, 2\), the model"):
        fit(state)


def test_an_unexpected_key_is_named_with_the_count():
    state = {
        "a.weight": torch.ones(2, 3),
        "bn.running_mean": torch.ones(2),
        "head.weight": torch.ones(5, 2),
        "extra.one": torch.ones(1),
        "extra.two": torch.ones(1),
    }
    with pytest.raises(AssetError, match=r"holds 'extra\.one'.*\(2 such keys\)"):
        fit(state)


def test_weights_live_in_the_bgbias_home(tmp_path, monkeypatch):
    assert weights_dir(tmp_path) == tmp_path / "weights"
    monkeypatch.setenv("BGBIAS_HOME", str(tmp_path / "env"))
    assert weights_dir() == tmp_path / "env" / "weights"
