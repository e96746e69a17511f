"""A TorchScript file from elsewhere runs tensor operators only (bgbias/engine/torchscript_guard.py): hostile
files are refused before they load or before they run, by the operator and the place they use; the models
people bring (torchvision's, bgbias's own exports) pass; ``--trust-model`` runs one's own files unchecked."""

from __future__ import annotations

import base64
import json
import pickle
import re
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
import torchvision
from click.testing import CliRunner
from torch import nn

from bgbias.cli import main
from bgbias.engine.config import resolve_config
from bgbias.engine.model_spec import load_network
from bgbias.engine.torchscript_guard import OPERATORS_FILE, _pickle_problems, allowed_operators
from bgbias.errors import ModelError
from bgbias.methods.base import MethodSpec
from bgbias.methods.registry import method_class, method_names
from bgbias.models.registry import backbone_names, build_backbone
from tests.engine.external import Embed, export_torchscript

CPU = torch.device("cpu")
ORIGINAL = b"ORIGINAL-CONTENT"


class ReadsFile(nn.Module):
    """The issue's repro: a forward that maps a file into a tensor and writes into it."""

    def __init__(self, victim: str):
        super().__init__()
        self.victim = victim

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        mapped = torch.from_file(self.victim, shared=True, size=4, dtype=torch.uint8)
        mapped.fill_(66)
        return images.mean(dim=(2, 3)) + mapped.float().sum() * 0


class Helper(nn.Module):
    def __init__(self, victim: str):
        super().__init__()
        self.victim = victim

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean(dim=(2, 3))

    @torch.jit.export
    def peek(self, images: torch.Tensor) -> torch.Tensor:
        return images + torch.from_file(self.victim, size=4, dtype=torch.uint8).float().sum()


class HidesInAMethod(nn.Module):
    """A clean forward; the file access sits in another method of a submodule."""

    def __init__(self, victim: str):
        super().__init__()
        self.helper = Helper(victim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.helper(images)


class RunsOnLoad(nn.Module):
    """Writes into the file in ``__setstate__``, which ``torch.jit.load`` runs."""

    def __init__(self, victim: str):
        super().__init__()
        self.victim = victim
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean(dim=(2, 3)) * self.scale

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, str, bool]:
        return self.scale, self.victim, self.training

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, str, bool]) -> None:
        mapped = torch.from_file(state[1], shared=True, size=4, dtype=torch.uint8)
        mapped.fill_(67)
        self.scale = state[0] + mapped.float().sum() * 0
        self.victim = state[1]
        self.training = state[2]


class Plain(nn.Module):
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean(dim=(2, 3))


def _hook(module: nn.Module, inputs: tuple[torch.Tensor], output: torch.Tensor) -> torch.Tensor:
    return output + torch.from_file("/nonexistent", size=1, dtype=torch.uint8).float().sum()


def _save(module: nn.Module, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(module), str(path))
    return path


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_bytes(ORIGINAL)
    return path


def _opaque_archive(tmp_path: Path, marker: Path) -> Path:
    """A plain scripted module whose archive also holds a ``torch.classes.aten.OpaqueObject``: its C++
    ``__setstate__`` unpickles the payload, which writes ``marker``."""
    plain = _save(Plain(), tmp_path / "plain.pt")

    class Payload:
        def __reduce__(self):
            return exec, (f"open({str(marker)!r}, 'w').write('ran')",)

    state = base64.b64encode(pickle.dumps(Payload())).decode()

    def text(value: str) -> bytes:
        return b"X" + len(value.encode()).to_bytes(4, "little") + value.encode()

    data = (b"\x80\x02c__torch__\nPlain\n)\x81}(" + text("training") + b"\x88"
            + text("_is_full_backward_hook") + b"N" + text("payload")
            + b"c__torch__.torch.classes.aten\nOpaqueObject\n)\x81" + text(state) + b"bub.")
    path = tmp_path / "opaque.pt"
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(path, "w") as crafted:
        for info in source.infolist():
            body = source.read(info.filename)
            if info.filename.endswith("code/__torch__.py"):
                body = re.sub(rb"(_is_full_backward_hook : Optional\[bool\]\n)",
                              rb"\1  payload : __torch__.torch.classes.aten.OpaqueObject\n", body)
            elif info.filename.endswith(".debug_pkl"):
                continue
            elif info.filename.endswith("/data.pkl"):
                body = data
            crafted.writestr(info.filename, body)
    return path


def test_a_model_that_writes_a_file_in_forward_is_refused_by_the_cli_and_runs_only_when_trusted(
        victim, tiny_bench, tmp_path):
    path = _save(ReadsFile(str(victim)), tmp_path / "model.pt")
    args = ["eval", "--model", str(path), "--dataset", "bench", "--root", str(tiny_bench / "bench"),
            "--device", "cpu", "--workers", "0", "--no-progress", "--out", str(tmp_path / "home")]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2, refused.output
    assert "aten::from_file (in <model>.forward)" in refused.output and "--trust-model" in refused.output
    assert victim.read_bytes() == ORIGINAL and not (tmp_path / "home").exists()
    trusted = CliRunner().invoke(main, [*args, "--trust-model"])
    assert trusted.exit_code == 0, trusted.output
    assert victim.read_bytes() == b"BBBB" + ORIGINAL[4:]  # what the flag lets one's own file do


def test_operators_are_checked_in_every_method_and_hook_of_every_submodule(victim, tmp_path):
    with pytest.raises(ModelError, match=r"aten::from_file \(in helper\.peek\)") as err:
        load_network(str(_save(HidesInAMethod(str(victim)), tmp_path / "method.pt")), {}, CPU)
    assert err.value.path == str(tmp_path / "method.pt") and "trust_model=True" in err.value.fix
    hooked = Plain()
    hooked.register_forward_hook(_hook)
    with pytest.raises(ModelError, match=r"aten::from_file \(in <model>\.hook _hook\)"):
        load_network(str(_save(hooked, tmp_path / "hooked.pt")), {}, CPU)
    assert victim.read_bytes() == ORIGINAL


def test_an_archive_whose_loading_would_run_its_code_is_refused_unopened(victim, tmp_path):
    path = _save(RunsOnLoad(str(victim)), tmp_path / "setstate.pt")
    victim.write_bytes(ORIGINAL)  # saving ran nothing of it, but be sure
    with pytest.raises(ModelError, match=r"defines __setstate__, which torch\.jit\.load runs"):
        load_network(str(path), {}, CPU)
    assert victim.read_bytes() == ORIGINAL
    marker = tmp_path / "ran.txt"
    with pytest.raises(ModelError, match=r"C\+\+ class torch\.classes\.aten\.OpaqueObject"):
        load_network(str(_opaque_archive(tmp_path, marker)), {}, CPU)
    assert not marker.exists()


def test_a_pickle_that_hides_a_class_name_is_refused():
    hidden = pickle.dumps(Embed, protocol=4)  # protocol 4 names classes with STACK_GLOBAL
    assert any("STACK_GLOBAL" in problem for problem in _pickle_problems(hidden))
    assert any("cannot be read" in problem for problem in _pickle_problems(b"\x80\x02not a pickle"))


def test_the_allowlist_holds_tensor_operators_only():
    allowed = allowed_operators()
    assert all(op.startswith(("aten::", "prim::")) for op in allowed)
    names = {str(schema).split("(")[0].split(".")[0] for schema in torch._C._jit_get_all_schemas()}
    dangerous = {name for name in names
                 if re.search(r"from_file|save|load|rpc|c10d|distributed|fork|wait|Print|thread", name)}
    assert {"aten::from_file", "aten::save", "aten::wait"} <= dangerous
    assert not allowed & dangerous
    assert not allowed & {"prim::CallMethod", "prim::CallFunction", "prim::CreateObject", "prim::PythonOp"}
    assert json.loads(OPERATORS_FILE.read_text())["made_by"] == "scripts/torchscript_operators.py"


def _torchvision(name: str) -> nn.Module:
    models = torchvision.models
    options = {"image_size": 32} if name == "vit_b_16" else {}  # the same operators at any size
    return getattr(models, name)(weights=None, **options).eval()


SLOW_TO_COMPILE = [pytest.param(name, marks=pytest.mark.slow) for name in ("efficientnet_b0", "vit_b_16")]


# The larger models take seconds each to compile: the full suite checks them, the quick loop the small ones.
@pytest.mark.slow
@pytest.mark.parametrize("how", ["scripted", "traced"])
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", *SLOW_TO_COMPILE])
def test_torchvision_models_pass(name, how, tmp_path):
    model = _torchvision(name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = (torch.jit.script(model) if how == "scripted"
                    else torch.jit.trace(model, torch.rand(1, 3, 32, 32), check_trace=False))
        torch.jit.save(compiled, str(tmp_path / "model.pt"))
    network = load_network(str(tmp_path / "model.pt"), {}, CPU)
    assert network.call(torch.rand(1, 3, 32, 32)).shape == (1, 1000)


def _exported(method: str, backbone: str, side: int, path: Path) -> Path:
    torch.manual_seed(0)
    spec = MethodSpec(16, 4, 8, options=resolve_config(method, "folder").loss, input_size=side)
    module = Embed(method_class(method)(build_backbone(backbone, pretrained=False), spec)).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(module, torch.rand(2, 3, side, side), strict=False), str(path))
    return path


@pytest.mark.parametrize("method", method_names())
def test_every_method_exported_as_users_export_it_passes(method, tmp_path):
    load_network(str(_exported(method, "tiny_cnn", 32, tmp_path / "model.pt")), {}, CPU)


@pytest.mark.parametrize("backbone", [pytest.param(name, marks=() if name == "tiny_cnn" else pytest.mark.slow)
                                      for name in backbone_names()])
def test_every_backbone_exported_passes(backbone, tmp_path):
    load_network(str(_exported("multi_similarity", backbone, 64, tmp_path / "model.pt")), {}, CPU)


def test_a_trained_runs_export_passes(tiny_run, tmp_path):
    load_network(str(export_torchscript(tiny_run, tmp_path / "run.pt")), {}, CPU)


def test_an_onnx_model_whose_external_data_leaves_its_folder_is_refused(tmp_path):
    """onnxruntime's own check, which bgbias relies on and pins here."""
    from onnx import TensorProto, helper

    secret = tmp_path / "secret.bin"
    secret.write_bytes(bytes(16))
    weights = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    for key, value in {"location": "../secret.bin", "offset": "0", "length": "16"}.items():
        weights.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["images", "w"], ["embedding"])], "g",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [None, 4])], initializer=[weights])
    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "model.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelError, match="escapes model directory"):
        load_network(str(path), {}, CPU)
