"""The set-up's environment imports torchvision and runs its models and compiled operators (issue 46 item 13):
users of a DML tool import torchvision all the time. A fresh interpreter, so nothing the suite imported before
(a shim, a stand-in operator) can hide a broken install."""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = """
import torch, torchvision
model = torchvision.models.resnet18().eval()
with torch.no_grad():
    print(tuple(model(torch.zeros(1, 3, 64, 64)).shape))
boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0]])
print(torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist())
"""


@pytest.mark.slow
def test_torchvision_imports_and_runs_a_model_and_its_operators_in_a_fresh_interpreter():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["(1, 1000)", "[0, 2]"]
