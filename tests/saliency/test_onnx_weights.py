"""rembg's u2netp.onnx as weights of our U²-Net: every initializer lands on exactly one parameter, the module
then gives what onnxruntime gives, and every file that is not exactly that network is refused with an
``AssetError`` naming it, without running or reading anything beyond the file itself."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from bgbias.errors import AssetError
from bgbias.saliency.onnx_weights import load_u2net, map_weights, read_onnx
from bgbias.saliency.u2net import u2net_input
from bgbias.saliency.u2net_network import U2NET, U2NETP, U2Net
from tests.engine.external import export_onnx, tiny_embedder
from tests.replicas import picture

FIX = "fetch the model again: bgbias assets fetch u2netp"
TOLERANCE = 1e-4
"""Largest |Δ| allowed between our module and onnxruntime on the soft output."""


@pytest.fixture(scope="module")
def u2netp_proto(u2netp_file):
    """The real file as a protobuf, to copy and damage."""
    return onnx.load(str(u2netp_file))


@pytest.fixture(scope="module")
def u2netp_model(u2netp_file) -> U2Net:
    return load_u2net(u2netp_file, U2NETP, fix=FIX)


@pytest.fixture(scope="module")
def onnxruntime_u2netp(u2netp_file) -> Callable[[np.ndarray], np.ndarray]:
    """onnxruntime's fused output for one ``(1, 3, 320, 320)`` input (the file's batch size is fixed at 1)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(u2netp_file), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda image: session.run(None, {name: image})[0]


def _ours(model: U2Net, images: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(images)).numpy()


def test_every_initializer_feeds_exactly_one_parameter(u2netp_file):
    model = U2Net(U2NETP)
    tensors, convs = read_onnx(u2netp_file, fix=FIX)
    state = map_weights(model, tensors, convs, path=u2netp_file, fix=FIX)
    assert set(state) == set(model.state_dict())
    assert len(tensors) == len(list(model.parameters())) == len(state)
    # A bijection by content: no two initializers are equal, and each is the value of one parameter.
    file_values = {value.tobytes() for value in tensors.values()}
    assert len(file_values) == len(tensors)
    assert {value.numpy().tobytes() for value in state.values()} == file_values
    assert np.array_equal(state["side.0.weight"].numpy(), tensors["side1.weight"])
    assert np.array_equal(state["side.5.bias"].numpy(), tensors["side6.bias"])
    assert np.array_equal(state["fuse.weight"].numpy(), tensors["outconv.weight"])


@pytest.mark.slow
def test_gives_what_onnxruntime_gives_on_random_input(u2netp_model, onnxruntime_u2netp):
    image = np.random.default_rng(0).standard_normal((1, 3, 320, 320)).astype(np.float32)
    assert np.abs(_ours(u2netp_model, image) - onnxruntime_u2netp(image)).max() <= TOLERANCE


@pytest.mark.slow
def test_gives_what_onnxruntime_gives_on_pictures_in_one_batch(u2netp_model, onnxruntime_u2netp):
    images = np.concatenate([u2net_input(picture(index, size=(131, 97))[0]) for index in range(2)])
    ours = _ours(u2netp_model, images)
    theirs = np.concatenate([onnxruntime_u2netp(image[None]) for image in images])
    assert ours.shape == (2, 1, 320, 320)
    assert ours.min() >= 0 and ours.max() <= 1 and ours.max() - ours.min() > 0.1  # a real saliency map
    assert np.abs(ours - theirs).max() <= TOLERANCE


def _refused(path: Path, *phrases: str, shape=U2NETP) -> AssetError:
    with pytest.raises(AssetError) as caught:
        load_u2net(path, shape, fix=FIX)
    assert caught.value.path == str(path)
    assert caught.value.fix == FIX
    for phrase in phrases:
        assert phrase in caught.value.problem
    return caught.value


def _saved(proto, path: Path) -> Path:
    """``proto`` written as it is (``onnx.save`` would move external tensors around)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(proto.SerializeToString())
    return path


def _copy(proto):
    copied = onnx.ModelProto()
    copied.CopyFrom(proto)
    return copied


def _initializer(proto, name: str):
    return next(tensor for tensor in proto.graph.initializer if tensor.name == name)


def _convs(proto) -> list:
    return [node for node in proto.graph.node if node.op_type == "Conv"]


def _attribute(node, name: str):
    return next(attribute for attribute in node.attribute if attribute.name == name)


FIRST_CONV = 0
"""The first Conv node of the graph: encoder stage 1's input convolution, weight (64, 3, 3, 3)."""


def test_a_truncated_copy_is_refused(u2netp_file, tmp_path):
    data = u2netp_file.read_bytes()
    path = tmp_path / "u2netp.onnx"
    path.write_bytes(data[: len(data) // 2])
    _refused(path, "not a readable ONNX file")


def test_random_bytes_are_refused(tmp_path):
    path = tmp_path / "u2netp.onnx"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    _refused(path, "not a readable ONNX file")


def test_an_empty_file_is_refused_as_empty(tmp_path):
    path = tmp_path / "u2netp.onnx"
    path.write_bytes(b"")
    _refused(path, "holds no graph")


def test_a_foreign_onnx_model_is_refused(tmp_path):
    path = export_onnx(tiny_embedder(), tmp_path / "u2netp.onnx", side=32)
    _refused(path, "another network")


def test_u2netp_is_refused_as_u2net(u2netp_file):
    _refused(u2netp_file, "has shape", shape=U2NET)


def test_an_initializer_of_another_shape_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    weight = _initializer(proto, _convs(proto)[FIRST_CONV].input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight)[:-1].copy(), weight.name))
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), repr(weight.name), "[63, 3, 3, 3]", "[64, 3, 3, 3]")


def test_an_initializer_whose_data_does_not_fill_its_shape_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    weight = _initializer(proto, _convs(proto)[FIRST_CONV].input[1])
    weight.dims[0] += 1
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), repr(weight.name), "damaged")


def test_an_initializer_nothing_uses_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    proto.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "unused"))
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "1 initializers", "'unused'")


def test_a_missing_initializer_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    name = _convs(proto)[FIRST_CONV].input[1]
    proto.graph.initializer.remove(_initializer(proto, name))
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "encoder.0.input.conv has no weight initializer")


def test_an_initializer_feeding_two_convolutions_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    first, second = _convs(proto)[2:4]  # encoder stage 1's second and third convolutions, both (16, 16, 3, 3)
    second.input[1] = first.input[1]
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "feeds two convolutions")


def test_a_named_convolution_given_twice_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    side = next(node for node in _convs(proto) if node.input[1] == "side1.weight")
    twin = proto.graph.node.add()
    twin.CopyFrom(side)
    twin.name, twin.output[0] = "side1_twin", "side1_twin_output"
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "8 of them named", "another network")


def test_a_convolution_of_another_dilation_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    dilated = next(node for node in _convs(proto) if list(_attribute(node, "dilations").ints) == [2, 2])
    _attribute(dilated, "dilations").ints[:] = [3, 3]
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "dilation (3, 3) (needs (2, 2))")


def test_a_convolution_attribute_of_another_type_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    _attribute(_convs(proto)[FIRST_CONV], "group").CopyFrom(helper.make_attribute("group", "one"))
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "group")


def test_a_float16_initializer_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    weight = _initializer(proto, _convs(proto)[FIRST_CONV].input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight).astype(np.float16), weight.name))
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), repr(weight.name), "FLOAT16")


_watched: list[str] | None = None
"""While a ``_files_opened`` block runs, the real path of every file Python opens."""
_hooked = False
"""An audit hook cannot be removed: one is added at the first block and stays, recording only in blocks."""


def _record_open(event: str, args: tuple) -> None:
    if event == "open" and _watched is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _watched.append(os.path.realpath(os.fsdecode(args[0])))


@contextmanager
def _files_opened() -> Iterator[list[str]]:
    global _watched, _hooked
    if not _hooked:
        sys.addaudithook(_record_open)
        _hooked = True
    _watched = opened = []
    try:
        yield opened
    finally:
        _watched = None


@pytest.mark.parametrize("location", ["../outside.bin", "weights.bin"])
def test_an_external_tensor_is_refused_without_reading_its_file(u2netp_proto, tmp_path, monkeypatch,
                                                                 location):
    proto = _copy(u2netp_proto)
    weight = _initializer(proto, _convs(proto)[FIRST_CONV].input[1])
    path = _saved(proto, tmp_path / "model" / "u2netp.onnx")
    # The bytes the tensor needs, outside the model's folder or beside it, and the working folder set so
    # that onnx would find them: read, the file would load.
    sentinel = path.parent / location
    sentinel.write_bytes(weight.raw_data)
    onnx.external_data_helper.set_external_data(weight, location=location, offset=0,
                                                length=len(weight.raw_data))
    weight.ClearField("raw_data")
    _saved(proto, path)
    monkeypatch.chdir(path.parent)
    with _files_opened() as opened:
        _refused(path, repr(weight.name), "in another file")
    assert os.path.realpath(path) in opened  # the watch sees the files read
    assert os.path.realpath(sentinel) not in opened


def test_a_graph_that_resizes_otherwise_is_refused(u2netp_proto, tmp_path):
    """Same weights, another function: nearest-neighbour upsampling in place of bilinear."""
    proto = _copy(u2netp_proto)
    resize = next(node for node in proto.graph.node if node.op_type == "Resize")
    _attribute(resize, "mode").CopyFrom(helper.make_attribute("mode", "nearest"))
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "Resize", "mode")


def test_a_graph_that_pools_without_ceil_mode_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    pool = next(node for node in proto.graph.node if node.op_type == "MaxPool")
    _attribute(pool, "ceil_mode").CopyFrom(helper.make_attribute("ceil_mode", 0))
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "MaxPool", "ceil_mode")


def test_a_graph_with_an_operation_u2net_lacks_is_refused(u2netp_proto, tmp_path):
    proto = _copy(u2netp_proto)
    next(node for node in proto.graph.node if node.op_type == "Relu").op_type = "LeakyRelu"
    _refused(_saved(proto, tmp_path / "u2netp.onnx"), "LeakyRelu", "another network")
